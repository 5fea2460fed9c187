import nodemailer from 'nodemailer';
import type { Config } from '../config';
import type { Logger } from '../logger';
import type { Mailer } from '../platform';

/**
 * The Node host's mail (DECISIONS §8): SMTP through nodemailer when
 * SMTP_URL is set; otherwise each message is written to the log, with its
 * links, so a local user can follow them (the embedded default has no mail
 * server). The SMTP URL may hold credentials: it is a Secret, never logged.
 */
export function createNodeMailer(config: Pick<Config, 'smtpUrl' | 'mailFrom'>, logger: Logger): Mailer & { close(): void } {
  if (!config.smtpUrl) {
    return {
      send: async (message) => logger.info('mail not sent (no SMTP_URL): its text follows', { ...message }),
      close: () => {},
    };
  }
  const transport = nodemailer.createTransport(config.smtpUrl.reveal());
  return {
    send: async (message) => {
      await transport.sendMail({ from: config.mailFrom, to: message.to, subject: message.subject, text: message.text });
    },
    close: () => transport.close(),
  };
}
