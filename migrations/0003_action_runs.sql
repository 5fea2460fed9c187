CREATE TABLE "action_runs" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"org_id" uuid NOT NULL,
	"project_id" uuid NOT NULL,
	"env_id" uuid NOT NULL,
	"action_id" uuid,
	"action_name" text NOT NULL,
	"entity_id" uuid,
	"operation_entity_name" text,
	"status" text DEFAULT 'pending' NOT NULL,
	"parameters" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"recommendations" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"triggered_by" text NOT NULL,
	"trigger" jsonb NOT NULL,
	"entity_snapshot" jsonb NOT NULL,
	"on_success" text,
	"on_failure" text,
	"callback_base_url" text NOT NULL,
	"idempotency_key" text,
	"request_fingerprint" text,
	"timeout_minutes" integer NOT NULL,
	"timeout_at" timestamp with time zone NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"started_at" timestamp with time zone,
	"completed_at" timestamp with time zone,
	"error" text,
	"output" jsonb,
	CONSTRAINT "action_runs_status_check" CHECK ("action_runs"."status" in ('pending', 'running', 'succeeded', 'failed', 'cancelled'))
);
--> statement-breakpoint
CREATE TABLE "delivery_jobs" (
	"run_id" uuid PRIMARY KEY NOT NULL,
	"env_id" uuid NOT NULL,
	"attempt" integer DEFAULT 1 NOT NULL,
	"run_at" timestamp with time zone NOT NULL,
	"lease_until" timestamp with time zone,
	"dispatched_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "run_attempts" (
	"run_id" uuid NOT NULL,
	"attempt" integer NOT NULL,
	"started_at" timestamp with time zone NOT NULL,
	"latency_ms" integer NOT NULL,
	"http_status" integer,
	"outcome" text NOT NULL,
	"error" text,
	CONSTRAINT "run_attempts_pk" PRIMARY KEY("run_id","attempt")
);
--> statement-breakpoint
ALTER TABLE "action_runs" ADD CONSTRAINT "action_runs_org_id_orgs_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."orgs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "action_runs" ADD CONSTRAINT "action_runs_project_id_projects_id_fk" FOREIGN KEY ("project_id") REFERENCES "public"."projects"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "action_runs" ADD CONSTRAINT "action_runs_env_id_environments_id_fk" FOREIGN KEY ("env_id") REFERENCES "public"."environments"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "action_runs" ADD CONSTRAINT "action_runs_action_id_actions_id_fk" FOREIGN KEY ("action_id") REFERENCES "public"."actions"("id") ON DELETE set null ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "action_runs" ADD CONSTRAINT "action_runs_entity_id_entities_id_fk" FOREIGN KEY ("entity_id") REFERENCES "public"."entities"("id") ON DELETE set null ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "delivery_jobs" ADD CONSTRAINT "delivery_jobs_run_id_action_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "public"."action_runs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "delivery_jobs" ADD CONSTRAINT "delivery_jobs_env_id_environments_id_fk" FOREIGN KEY ("env_id") REFERENCES "public"."environments"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "run_attempts" ADD CONSTRAINT "run_attempts_run_id_action_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "public"."action_runs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "action_runs_env_created_idx" ON "action_runs" USING btree ("env_id","created_at" DESC NULLS LAST,"id" DESC NULLS LAST);--> statement-breakpoint
CREATE INDEX "action_runs_entity_idx" ON "action_runs" USING btree ("entity_id");--> statement-breakpoint
CREATE UNIQUE INDEX "action_runs_env_idempotency_key_unique" ON "action_runs" USING btree ("env_id","idempotency_key") WHERE "action_runs"."idempotency_key" is not null;--> statement-breakpoint
CREATE INDEX "action_runs_active_timeout_idx" ON "action_runs" USING btree ("timeout_at") WHERE "action_runs"."status" in ('pending', 'running');--> statement-breakpoint
CREATE INDEX "delivery_jobs_run_at_idx" ON "delivery_jobs" USING btree ("run_at");