CREATE TABLE "cells" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"org_id" uuid NOT NULL,
	"project_id" uuid NOT NULL,
	"name" text NOT NULL,
	"display_name" text,
	"entity_type_name" text NOT NULL,
	"placement_policy" text NOT NULL,
	"constraints" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"parent_cells" text[] DEFAULT '{}'::text[] NOT NULL,
	"deployment_target" text,
	"membership_mode" text NOT NULL,
	"membership_derived_from" jsonb,
	"placement_counter" bigint DEFAULT 0 NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "cells_project_name_unique" UNIQUE("project_id","name")
);
--> statement-breakpoint
CREATE TABLE "entity_types" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"org_id" uuid NOT NULL,
	"project_id" uuid NOT NULL,
	"name" text NOT NULL,
	"display_name" text,
	"states" text[] NOT NULL,
	"initial_state" text NOT NULL,
	"properties" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"metrics" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"constraints" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"sync_tracked" boolean DEFAULT false NOT NULL,
	"sync_freshness" jsonb,
	"applier" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "entity_types_project_name_unique" UNIQUE("project_id","name")
);
--> statement-breakpoint
CREATE TABLE "relationship_types" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"org_id" uuid NOT NULL,
	"project_id" uuid NOT NULL,
	"name" text NOT NULL,
	"display_name" text,
	"from_entity_type_name" text NOT NULL,
	"to_entity_type_name" text NOT NULL,
	"cardinality" text NOT NULL,
	"states" text[] NOT NULL,
	"properties" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"constraints" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "relationship_types_project_name_unique" UNIQUE("project_id","name")
);
--> statement-breakpoint
CREATE TABLE "cell_members" (
	"cell_id" uuid NOT NULL,
	"env_id" uuid NOT NULL,
	"entity_id" uuid NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "cell_members_cell_id_entity_id_pk" PRIMARY KEY("cell_id","entity_id")
);
--> statement-breakpoint
CREATE TABLE "entities" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"org_id" uuid NOT NULL,
	"project_id" uuid NOT NULL,
	"env_id" uuid NOT NULL,
	"entity_type_name" text NOT NULL,
	"name" text NOT NULL,
	"state" text NOT NULL,
	"properties" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"labels" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"last_synced_at" timestamp with time zone,
	"sync_source" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "entities_env_name_unique" UNIQUE("env_id","name")
);
--> statement-breakpoint
CREATE TABLE "entity_changes" (
	"env_id" uuid NOT NULL,
	"seq" bigint NOT NULL,
	"type" text NOT NULL,
	"entity_id" uuid NOT NULL,
	"entity_name" text NOT NULL,
	"entity_type_name" text NOT NULL,
	"entity" jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "entity_changes_env_id_seq_pk" PRIMARY KEY("env_id","seq")
);
--> statement-breakpoint
CREATE TABLE "entity_metrics" (
	"entity_id" uuid NOT NULL,
	"name" text NOT NULL,
	"value" double precision NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "entity_metrics_entity_id_name_pk" PRIMARY KEY("entity_id","name")
);
--> statement-breakpoint
CREATE TABLE "entity_unique_keys" (
	"env_id" uuid NOT NULL,
	"entity_type_name" text NOT NULL,
	"constraint_key" text NOT NULL,
	"value_key" text NOT NULL,
	"entity_id" uuid NOT NULL,
	CONSTRAINT "entity_unique_keys_env_id_entity_type_name_constraint_key_value_key_pk" PRIMARY KEY("env_id","entity_type_name","constraint_key","value_key")
);
--> statement-breakpoint
CREATE TABLE "relationships" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"org_id" uuid NOT NULL,
	"project_id" uuid NOT NULL,
	"env_id" uuid NOT NULL,
	"relationship_type_name" text NOT NULL,
	"from_entity_id" uuid NOT NULL,
	"to_entity_id" uuid NOT NULL,
	"from_exclusive" uuid,
	"to_exclusive" uuid,
	"state" text NOT NULL,
	"properties" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"labels" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "relationships_pair_unique" UNIQUE("env_id","relationship_type_name","from_entity_id","to_entity_id"),
	CONSTRAINT "relationships_from_exclusive_unique" UNIQUE("env_id","relationship_type_name","from_exclusive"),
	CONSTRAINT "relationships_to_exclusive_unique" UNIQUE("env_id","relationship_type_name","to_exclusive")
);
--> statement-breakpoint
ALTER TABLE "environments" ADD COLUMN "change_seq" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "cells" ADD CONSTRAINT "cells_org_id_orgs_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."orgs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "cells" ADD CONSTRAINT "cells_project_id_projects_id_fk" FOREIGN KEY ("project_id") REFERENCES "public"."projects"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "entity_types" ADD CONSTRAINT "entity_types_org_id_orgs_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."orgs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "entity_types" ADD CONSTRAINT "entity_types_project_id_projects_id_fk" FOREIGN KEY ("project_id") REFERENCES "public"."projects"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "relationship_types" ADD CONSTRAINT "relationship_types_org_id_orgs_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."orgs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "relationship_types" ADD CONSTRAINT "relationship_types_project_id_projects_id_fk" FOREIGN KEY ("project_id") REFERENCES "public"."projects"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "cell_members" ADD CONSTRAINT "cell_members_cell_id_cells_id_fk" FOREIGN KEY ("cell_id") REFERENCES "public"."cells"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "cell_members" ADD CONSTRAINT "cell_members_env_id_environments_id_fk" FOREIGN KEY ("env_id") REFERENCES "public"."environments"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "cell_members" ADD CONSTRAINT "cell_members_entity_id_entities_id_fk" FOREIGN KEY ("entity_id") REFERENCES "public"."entities"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "entities" ADD CONSTRAINT "entities_env_id_environments_id_fk" FOREIGN KEY ("env_id") REFERENCES "public"."environments"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "entities" ADD CONSTRAINT "entities_entity_type_fk" FOREIGN KEY ("project_id","entity_type_name") REFERENCES "public"."entity_types"("project_id","name") ON DELETE restrict ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "entity_changes" ADD CONSTRAINT "entity_changes_env_id_environments_id_fk" FOREIGN KEY ("env_id") REFERENCES "public"."environments"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "entity_metrics" ADD CONSTRAINT "entity_metrics_entity_id_entities_id_fk" FOREIGN KEY ("entity_id") REFERENCES "public"."entities"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "entity_unique_keys" ADD CONSTRAINT "entity_unique_keys_env_id_environments_id_fk" FOREIGN KEY ("env_id") REFERENCES "public"."environments"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "entity_unique_keys" ADD CONSTRAINT "entity_unique_keys_entity_id_entities_id_fk" FOREIGN KEY ("entity_id") REFERENCES "public"."entities"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "relationships" ADD CONSTRAINT "relationships_env_id_environments_id_fk" FOREIGN KEY ("env_id") REFERENCES "public"."environments"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "relationships" ADD CONSTRAINT "relationships_from_entity_id_entities_id_fk" FOREIGN KEY ("from_entity_id") REFERENCES "public"."entities"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "relationships" ADD CONSTRAINT "relationships_to_entity_id_entities_id_fk" FOREIGN KEY ("to_entity_id") REFERENCES "public"."entities"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "relationships" ADD CONSTRAINT "relationships_relationship_type_fk" FOREIGN KEY ("project_id","relationship_type_name") REFERENCES "public"."relationship_types"("project_id","name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "cell_members_entity_idx" ON "cell_members" USING btree ("entity_id");--> statement-breakpoint
CREATE INDEX "entities_env_type_name_idx" ON "entities" USING btree ("env_id","entity_type_name","name");--> statement-breakpoint
CREATE INDEX "entities_project_type_idx" ON "entities" USING btree ("project_id","entity_type_name");--> statement-breakpoint
CREATE INDEX "entities_labels_idx" ON "entities" USING gin ("labels" jsonb_path_ops);--> statement-breakpoint
CREATE INDEX "entity_changes_at_idx" ON "entity_changes" USING btree ("created_at");--> statement-breakpoint
CREATE INDEX "entity_unique_keys_entity_idx" ON "entity_unique_keys" USING btree ("entity_id");--> statement-breakpoint
CREATE INDEX "relationships_to_idx" ON "relationships" USING btree ("to_entity_id");--> statement-breakpoint
CREATE INDEX "relationships_from_idx" ON "relationships" USING btree ("from_entity_id");