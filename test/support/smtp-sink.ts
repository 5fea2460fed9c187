import type { AddressInfo } from 'node:net';
import { simpleParser } from 'mailparser';
import { SMTPServer } from 'smtp-server';

/** A message the sink received over SMTP, parsed. */
export interface ReceivedMail {
  /** The envelope's sender and recipients (what the client said in MAIL FROM / RCPT TO). */
  envelope: { from: string | null; to: string[] };
  subject: string;
  text: string;
  /** The From header, as an address. */
  from: string | null;
}

/**
 * A real SMTP server on 127.0.0.1 (a free port) that keeps every message
 * it receives: point SMTP_URL at `url` and the host's own mailer delivers to
 * it. No TLS (STARTTLS is not offered, so a client does not try to upgrade to
 * a self-signed certificate) and no authentication.
 */
export class SmtpSink {
  readonly messages: ReceivedMail[] = [];
  readonly #waiters = new Set<() => void>();
  readonly #server: SMTPServer;
  #port = 0;

  private constructor() {
    this.#server = new SMTPServer({
      authOptional: true,
      disabledCommands: ['STARTTLS'],
      logger: false,
      onData: (stream, session, callback) => {
        simpleParser(stream)
          .then((parsed) => {
            this.messages.push({
              envelope: {
                from: session.envelope.mailFrom ? session.envelope.mailFrom.address : null,
                to: session.envelope.rcptTo.map((rcpt) => rcpt.address),
              },
              subject: parsed.subject ?? '',
              text: parsed.text ?? '',
              from: parsed.from?.value[0]?.address ?? null,
            });
            for (const wake of this.#waiters) wake();
            callback();
          })
          .catch((error: Error) => callback(error));
      },
    });
  }

  static async start(): Promise<SmtpSink> {
    const sink = new SmtpSink();
    await new Promise<void>((resolve, reject) => {
      sink.#server.once('error', reject);
      const listening = sink.#server.listen(0, '127.0.0.1', () => {
        sink.#port = (listening.address() as AddressInfo).port;
        resolve();
      });
    });
    return sink;
  }

  get port(): number {
    return this.#port;
  }

  /** The value for SMTP_URL. */
  get url(): string {
    return `smtp://127.0.0.1:${this.#port}`;
  }

  /** The first message (received already or later) for which `predicate` holds; rejects after `timeoutMs`. */
  waitFor(predicate: (mail: ReceivedMail) => boolean, timeoutMs = 10_000): Promise<ReceivedMail> {
    const found = this.messages.find(predicate);
    if (found) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const check = () => {
        const mail = this.messages.find(predicate);
        if (!mail) return;
        this.#waiters.delete(check);
        clearTimeout(timer);
        resolve(mail);
      };
      const timer = setTimeout(() => {
        this.#waiters.delete(check);
        reject(new Error(`no matching mail within ${timeoutMs} ms; received: ${this.messages.map((m) => m.subject).join(' | ') || 'nothing'}`));
      }, timeoutMs);
      this.#waiters.add(check);
    });
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.#server.close(() => resolve()));
  }
}
