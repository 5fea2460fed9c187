/**
 * `notify(tx, ...items)`: writes notifications in the transaction of the
 * change they tell about. The implementation is shared with the run engine
 * and lives in src/db/notifications.ts (src/runs/ may not import a module).
 */
export { notify, type NewNotification, type NotificationKind } from '../../db/notifications';
