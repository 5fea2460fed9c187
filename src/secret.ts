/**
 * A secret value that cannot leak by accident: printing, string
 * interpolation, JSON serialisation and Node's inspector all show
 * `[redacted]`. The raw value is reached only through `reveal()`, so every
 * place that needs it is greppable.
 */
export class Secret {
  readonly #value: string;

  constructor(value: string) {
    this.#value = value;
  }

  reveal(): string {
    return this.#value;
  }

  toString(): string {
    return '[redacted]';
  }

  toJSON(): string {
    return '[redacted]';
  }

  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return 'Secret([redacted])';
  }
}
