import { OpenAPIHono } from '@hono/zod-openapi';
import type { AppEnv } from '../../context';

export const preferenceRoutes = new OpenAPIHono<AppEnv>();
