/**
 * A deterministic, realistic Terraform state (format 4) of any size, for the
 * import benchmark and for tests: the same options give the same state, byte
 * for byte. Shaped like a platform's state: a network module called with
 * for_each per region, an app module called with count per service, counted
 * and keyed instances, a sensitive password per database, data sources,
 * and dependencies on counted resources.
 */

export interface GenerateOptions {
  /** Managed resource instances in the state (data sources come on top). */
  resources: number;
  lineage?: string;
  serial?: number;
}

/** The raw state object, as Terraform writes it; `JSON.stringify` it for a file. */
export function generateState(options: GenerateOptions): Record<string, unknown> {
  const total = Math.max(0, Math.floor(options.resources));
  const lineage = options.lineage ?? '5b1b4c5e-7f0e-4c1a-9b43-bench0000001';
  const resources: Record<string, unknown>[] = [];
  let made = 0;
  const room = () => total - made;

  const regions = ['us-east-1', 'us-west-2', 'eu-west-1', 'ap-south-1'];
  // per region (for_each module "network"): a VPC and three counted subnets
  for (const region of regions) {
    if (room() <= 0) break;
    const module = `module.network["${region}"]`;
    resources.push(managed(module, 'aws_vpc', 'main', [{ key: undefined, attributes: { id: `vpc-${hex(region, 8)}`, cidr_block: '10.0.0.0/16', enable_dns_support: true, tags: { Region: region } }, dependencies: [] }]));
    made += 1;
    const subnets = Math.min(3, room());
    if (subnets > 0) {
      resources.push(
        managed(
          module,
          'aws_subnet',
          'private',
          Array.from({ length: subnets }, (_, i) => ({
            key: i,
            attributes: { id: `subnet-${hex(`${region}${i}`, 8)}`, vpc_id: `vpc-${hex(region, 8)}`, cidr_block: `10.0.${i}.0/24`, map_public_ip_on_launch: false, availability_zone: `${region}${'abc'[i]}` },
            dependencies: ['module.network.aws_vpc.main'],
          })),
        ),
      );
      made += subnets;
    }
  }
  resources.push({
    mode: 'data',
    type: 'aws_ami',
    name: 'ubuntu',
    provider: 'provider["registry.terraform.io/hashicorp/aws"]',
    instances: [{ schema_version: 0, attributes: { id: 'ami-0abcdef1234567890', name: 'ubuntu-jammy-22.04' }, sensitive_attributes: [] }],
  });

  // services (count module "app"): a security group, a database with a sensitive password, instances
  const perService = 100;
  for (let service = 0; room() > 0; service++) {
    const module = `module.app[${service}]`;
    const region = regions[service % regions.length]!;
    resources.push(managed(module, 'aws_security_group', 'web', [{ key: undefined, attributes: { id: `sg-${hex(`sg${service}`, 8)}`, name: `svc-${service}`, ingress: [{ from_port: 443, to_port: 443, protocol: 'tcp', cidr_blocks: ['0.0.0.0/0'] }] }, dependencies: ['module.network.aws_vpc.main'] }]));
    made += 1;
    if (room() > 0) {
      resources.push(
        managed(module, 'aws_db_instance', 'main', [
          {
            key: undefined,
            attributes: { id: `db-${service}`, engine: 'postgres', allocated_storage: 20 + (service % 5) * 10, username: 'app', password: `pw-${hex(`pw${service}`, 16)}`, multi_az: service % 2 === 0 },
            sensitive: [[{ type: 'get_attr', value: 'password' }]],
            dependencies: ['module.app.aws_security_group.web', 'module.network.aws_subnet.private'],
          },
        ]),
      );
      made += 1;
    }
    const instances = Math.min(perService, room());
    if (instances > 0) {
      resources.push(
        managed(
          module,
          'aws_instance',
          'web',
          Array.from({ length: instances }, (_, i) => ({
            key: i,
            attributes: {
              id: `i-${hex(`${service}-${i}`, 17)}`,
              ami: 'ami-0abcdef1234567890',
              instance_type: ['t3.micro', 't3.small', 'm5.large'][(service + i) % 3],
              private_ip: `10.${service % 250}.${Math.floor(i / 250)}.${i % 250}`,
              monitoring: i % 2 === 0,
              cpu_core_count: 2,
              tags: { Name: `svc-${service}-web-${i}`, Service: `svc-${service}`, Region: region },
              root_block_device: [{ volume_size: 8, volume_type: 'gp3', encrypted: true }],
              user_data: null,
            },
            dependencies: ['data.aws_ami.ubuntu', 'module.app.aws_security_group.web'],
          })),
        ),
      );
      made += instances;
    }
  }

  return {
    version: 4,
    terraform_version: '1.9.8',
    serial: options.serial ?? 1,
    lineage,
    outputs: {},
    resources,
    check_results: null,
  };
}

interface GeneratedInstance {
  key: number | string | undefined;
  attributes: Record<string, unknown>;
  sensitive?: unknown[];
  dependencies: string[];
}

function managed(module: string, type: string, name: string, instances: GeneratedInstance[]): Record<string, unknown> {
  return {
    module,
    mode: 'managed',
    type,
    name,
    provider: 'provider["registry.terraform.io/hashicorp/aws"]',
    instances: instances.map((instance) => ({
      ...(instance.key === undefined ? {} : { index_key: instance.key }),
      schema_version: 1,
      attributes: instance.attributes,
      sensitive_attributes: instance.sensitive ?? [],
      private: 'eyJzY2hlbWFfdmVyc2lvbiI6IjEifQ==',
      dependencies: instance.dependencies,
    })),
  };
}

/** Deterministic hex of `length` characters derived from `seed` (FNV-1a, repeated). */
function hex(seed: string, length: number): string {
  let out = '';
  let round = 0;
  while (out.length < length) {
    let hash = 0x811c9dc5 ^ round++;
    for (let i = 0; i < seed.length; i++) {
      hash ^= seed.charCodeAt(i);
      hash = Math.imul(hash, 0x01000193) >>> 0;
    }
    out += hash.toString(16).padStart(8, '0');
  }
  return out.slice(0, length);
}
