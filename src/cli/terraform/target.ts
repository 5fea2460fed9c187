import type { CellplaneClient, EnvRef, Schemas } from '../../sdk';
import type { EntityTypeRequestBody, EntityTypeView, RelationshipTypeSpec } from './mapping';

/**
 * Everything the import asks of the API, as one small interface: the engine
 * (run.ts) is written against it, and `sdkTarget` implements it on the SDK.
 * Each method is one route (docs/terraform-import.md lists them).
 */

/** `POST ENV/batch` body and answer (docs/batch.md), as the server's routes define them. */
export type BatchRequest = Schemas['BatchRequest'];
export type BatchResult = Schemas['BatchResult'];
export type EntityConflict = Schemas['BatchEntityConflict'];

/** An entity as the list answers it: what the plan compares. */
export interface StoredEntity {
  id: string;
  name: string;
  entityTypeName: string;
  properties: Record<string, unknown>;
  labels: Record<string, string>;
  syncSource: string | null;
}

export interface StoredRelationshipType extends RelationshipTypeSpec {
  cardinality: string;
}

export interface StoredRelationship {
  relationshipTypeName: string;
  fromEntityId: string;
  toEntityId: string;
}

export interface ImportTarget {
  /** `GET PROJ/entity-types`. */
  entityTypes(): Promise<EntityTypeView[]>;
  /** `POST PROJ/entity-types`. */
  createEntityType(body: EntityTypeRequestBody): Promise<void>;
  /** `PUT PROJ/entity-types/{name}`. */
  replaceEntityType(body: EntityTypeRequestBody): Promise<void>;
  /** `GET PROJ/relationship-types`. */
  relationshipTypes(): Promise<StoredRelationshipType[]>;
  /** `POST PROJ/relationship-types` (many-to-many, state `present`, displayName `depends on`). */
  createRelationshipType(spec: RelationshipTypeSpec): Promise<void>;
  /** `GET ENV/entities?syncSource=` page after page. */
  ownedEntities(source: string): AsyncIterable<StoredEntity>;
  /** `GET ENV/entities?namePrefix=` page after page. */
  entitiesWithPrefix(prefix: string): AsyncIterable<StoredEntity>;
  /** `GET ENV/relationships?relationshipType=` page after page. */
  relationships(relationshipType: string): AsyncIterable<StoredRelationship>;
  /** `POST ENV/batch`. */
  batch(body: BatchRequest): Promise<BatchResult>;
}

const PAGE = 1000;

/** The target on the SDK: `client` for the API, `env` for where the entities live. */
export function sdkTarget(client: CellplaneClient, env: EnvRef): ImportTarget {
  const project = { o: env.org, p: env.project };
  const environment = { ...project, envName: env.env };
  return {
    async entityTypes() {
      return (await client.GET('/{o}/{p}/entity-types', { params: { path: project } })) as unknown as EntityTypeView[];
    },
    async createEntityType(body) {
      await client.POST('/{o}/{p}/entity-types', { params: { path: project }, body: body as never });
    },
    async replaceEntityType(body) {
      await client.PUT('/{o}/{p}/entity-types/{name}', { params: { path: { ...project, name: body.name } }, body: body as never });
    },
    async relationshipTypes() {
      const types = await client.GET('/{o}/{p}/relationship-types', { params: { path: project } });
      return types.map((type) => ({ name: type.name, from: type.fromEntityTypeName, to: type.toEntityTypeName, cardinality: type.cardinality }));
    },
    async createRelationshipType(spec) {
      await client.POST('/{o}/{p}/relationship-types', {
        params: { path: project },
        body: {
          kind: 'RelationshipType',
          name: spec.name,
          displayName: 'depends on',
          from: spec.from,
          to: spec.to,
          cardinality: 'many-to-many',
          states: ['present'],
        },
      });
    },
    ownedEntities(source) {
      return client.paginate('/{o}/{p}/envs/{envName}/entities', {
        params: { path: environment, query: { syncSource: source, limit: PAGE } },
      }) as AsyncIterable<StoredEntity>;
    },
    entitiesWithPrefix(prefix) {
      return client.paginate('/{o}/{p}/envs/{envName}/entities', {
        params: { path: environment, query: { namePrefix: prefix, limit: PAGE } },
      }) as AsyncIterable<StoredEntity>;
    },
    relationships(relationshipType) {
      return client.paginate('/{o}/{p}/envs/{envName}/relationships', {
        params: { path: environment, query: { relationshipType, limit: PAGE } },
      }) as AsyncIterable<StoredRelationship>;
    },
    async batch(body) {
      return client.POST('/{o}/{p}/envs/{envName}/batch', { params: { path: environment }, body });
    },
  };
}

async function* nothing<T>(): AsyncGenerator<T> {}

/**
 * A project that does not exist yet, for a dry run (which must not create
 * it): no types, no entities, no relationships. Everything is then planned
 * on the client; nothing is ever sent to it.
 */
export function emptyProjectTarget(): ImportTarget {
  const refuse = async (): Promise<never> => {
    throw new Error('the project does not exist yet: a dry run writes nothing to it');
  };
  return {
    entityTypes: async () => [],
    relationshipTypes: async () => [],
    ownedEntities: () => nothing(),
    entitiesWithPrefix: () => nothing(),
    relationships: () => nothing(),
    createEntityType: refuse,
    replaceEntityType: refuse,
    createRelationshipType: refuse,
    batch: refuse,
  };
}
