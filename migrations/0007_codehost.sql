CREATE TABLE "github_installations" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"installation_id" bigint NOT NULL,
	"org_id" uuid NOT NULL,
	"account_login" text NOT NULL,
	"account_type" text NOT NULL,
	"status" text DEFAULT 'active' NOT NULL,
	"granted_repos" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"repository_selection" text DEFAULT 'selected' NOT NULL,
	"claimed_by_user_id" uuid,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"deleted_at" timestamp with time zone,
	CONSTRAINT "github_installations_status_check" CHECK ("github_installations"."status" in ('active', 'suspended', 'deleted'))
);
--> statement-breakpoint
CREATE TABLE "project_github_repos" (
	"org_id" uuid NOT NULL,
	"project_id" uuid NOT NULL,
	"owner" text NOT NULL,
	"name" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "project_github_repos_project_id_owner_name_pk" PRIMARY KEY("project_id","owner","name")
);
--> statement-breakpoint
ALTER TABLE "action_runs" ADD COLUMN "repo" text;--> statement-breakpoint
ALTER TABLE "action_runs" ADD COLUMN "pr_number" integer;--> statement-breakpoint
ALTER TABLE "action_runs" ADD COLUMN "pr_url" text;--> statement-breakpoint
ALTER TABLE "action_runs" ADD COLUMN "head_sha" text;--> statement-breakpoint
ALTER TABLE "github_installations" ADD CONSTRAINT "github_installations_org_id_orgs_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."orgs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "project_github_repos" ADD CONSTRAINT "project_github_repos_org_id_orgs_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."orgs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "project_github_repos" ADD CONSTRAINT "project_github_repos_project_id_projects_id_fk" FOREIGN KEY ("project_id") REFERENCES "public"."projects"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "github_installations_installation_unique" ON "github_installations" USING btree ("installation_id");--> statement-breakpoint
CREATE INDEX "github_installations_org_idx" ON "github_installations" USING btree ("org_id");--> statement-breakpoint
CREATE INDEX "project_github_repos_repo_idx" ON "project_github_repos" USING btree ("owner","name");--> statement-breakpoint
CREATE INDEX "action_runs_active_pull_request_idx" ON "action_runs" USING btree ("repo","pr_number") WHERE "action_runs"."status" in ('pending', 'running') and "action_runs"."repo" is not null;