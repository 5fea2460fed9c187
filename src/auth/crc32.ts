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

export function crc32(text: string): number {
  let crc = 0xffffffff;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    // a token is ASCII, one byte a character, and is checked on every request without encoding it; past ASCII the
    // checksum is over the UTF-8 bytes
    if (code > 0x7f) return crc32OfBytes(new TextEncoder().encode(text));
    crc = TABLE[(crc ^ code) & 0xff]! ^ (crc >>> 8);
  }
  return (crc ^ 0xffffffff) >>> 0;
}

function crc32OfBytes(bytes: Uint8Array): number {
  let crc = 0xffffffff;
  for (const byte of bytes) crc = TABLE[(crc ^ byte) & 0xff]! ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}
