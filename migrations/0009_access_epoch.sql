CREATE TABLE "access_epoch" (
	"id" integer PRIMARY KEY DEFAULT 1 NOT NULL,
	"value" bigint DEFAULT 0 NOT NULL,
	CONSTRAINT "access_epoch_singleton" CHECK ("access_epoch"."id" = 1)
);
--> statement-breakpoint
INSERT INTO "access_epoch" ("id", "value") VALUES (1, 0);--> statement-breakpoint
-- Moves the epoch in the changing statement's own transaction, before its
-- first row: a reader's snapshot sees the change and the new epoch together,
-- or neither; and a transaction that changes these tables takes the epoch's
-- row lock before any of their row locks, in the same order every time.
CREATE FUNCTION "cellplane_bump_access_epoch"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE "access_epoch" SET "value" = "value" + 1 WHERE "id" = 1;
  RETURN NULL;
END
$$;--> statement-breakpoint
CREATE TRIGGER "service_tokens_access_epoch" BEFORE UPDATE OR DELETE OR TRUNCATE ON "service_tokens" FOR EACH STATEMENT EXECUTE FUNCTION "cellplane_bump_access_epoch"();--> statement-breakpoint
CREATE TRIGGER "orgs_access_epoch" BEFORE UPDATE OR DELETE OR TRUNCATE ON "orgs" FOR EACH STATEMENT EXECUTE FUNCTION "cellplane_bump_access_epoch"();--> statement-breakpoint
CREATE TRIGGER "projects_access_epoch" BEFORE UPDATE OR DELETE OR TRUNCATE ON "projects" FOR EACH STATEMENT EXECUTE FUNCTION "cellplane_bump_access_epoch"();--> statement-breakpoint
-- every entity and relationship write moves its environment's change_seq: not an access change
CREATE TRIGGER "environments_access_epoch" BEFORE UPDATE OF "id", "org_id", "project_id", "name" OR DELETE OR TRUNCATE ON "environments" FOR EACH STATEMENT EXECUTE FUNCTION "cellplane_bump_access_epoch"();
