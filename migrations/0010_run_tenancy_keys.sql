-- A run's organization and project, and a delivery job's environment, keep
-- their columns but lose their foreign keys: the run's environment key
-- (ON DELETE CASCADE) already removes runs with their environment, and the
-- environment goes with its project and organization; a job goes with its
-- run. Each key checked on insert is a lookup and a row lock on the trigger's
-- path (bench/http-results.md, "2026-11-29, evening").
ALTER TABLE "action_runs" DROP CONSTRAINT "action_runs_org_id_orgs_id_fk";
--> statement-breakpoint
ALTER TABLE "action_runs" DROP CONSTRAINT "action_runs_project_id_projects_id_fk";
--> statement-breakpoint
ALTER TABLE "delivery_jobs" DROP CONSTRAINT "delivery_jobs_env_id_environments_id_fk";
