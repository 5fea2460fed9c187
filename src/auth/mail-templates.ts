import type { MailMessage } from '../platform';

/**
 * The text of the service's own mail. Plain text only: every link is on a
 * line of its own, so a terminal or a test can take it as is.
 */

export const verificationMessage = (to: string, url: string): MailMessage => ({
  to,
  subject: 'Verify your email address for Cellplane',
  text: `Confirm that ${to} is your address by opening this link:\n\n${url}\n\nIf you did not sign up for Cellplane, ignore this message.\n`,
});

export const passwordResetMessage = (to: string, url: string): MailMessage => ({
  to,
  subject: 'Reset your Cellplane password',
  text: `Open this link to choose a new password:\n\n${url}\n\nIf you did not ask for this, ignore this message: your password stays as it is.\n`,
});

export const invitationMessage = (to: string, url: string): MailMessage => ({
  to,
  subject: 'You were invited to Cellplane',
  text: `An organization on Cellplane added ${to} as a member. Open this link to choose your password and sign in:\n\n${url}\n`,
});
