/**
 * CRC-32 (IEEE 802.3, the zlib/PNG polynomial). Used only as the token
 * checksum that lets malformed tokens be refused without a database query:
 * an integrity check against typos and forgeries by guessing, not a MAC.
 */
const TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

const NON_ASCII = /[^\x00-\x7f]/;

export function crc32(text: string): number {
  // a token is ASCII, its characters its UTF-8 bytes: it is checked on every request without being encoded first
  const bytes = NON_ASCII.test(text) ? new TextEncoder().encode(text) : undefined;
  const length = bytes ? bytes.length : text.length;
  let crc = 0xffffffff;
  for (let i = 0; i < length; i++) crc = TABLE[(crc ^ (bytes ? bytes[i]! : text.charCodeAt(i))) & 0xff]! ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}
