import { OpenAPIHono } from '@hono/zod-openapi';
import type { AppEnv } from '../../context';

export const entityTypeRoutes = new OpenAPIHono<AppEnv>();
