import { OpenAPIHono } from '@hono/zod-openapi';
import type { AppEnv } from '../../context';

export const notificationRoutes = new OpenAPIHono<AppEnv>();
