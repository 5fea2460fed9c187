/** A webhook delivery from GitHub as a route hands it to its service: the headers that matter and the exact body. */
export interface GitHubDelivery {
  /** X-GitHub-Event. */
  event: string | undefined;
  /** X-GitHub-Delivery. */
  deliveryId: string | undefined;
  /** X-Hub-Signature-256. */
  signature: string | undefined;
  contentType: string | undefined;
  /** The raw body, exactly as received: the signature is over these bytes. */
  body: string;
}

/** What an X-Hub-Signature-256 header looks like; anything else is refused before any HMAC is computed. */
export const SIGNATURE_SHAPE = /^sha256=[0-9a-f]{64}$/;
