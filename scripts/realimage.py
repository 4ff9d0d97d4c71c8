"""Real, decodable images of a chosen size for the test and bench origins (thumbd checks
every body with libvips's header read, so signature-plus-noise no longer passes).

jpeg(seed, size): an 8x8 baseline JPEG whose colour depends on `seed`, padded to `size`
bytes with COM segments of deterministic bytes (decoders skip them).
png(seed, size, side): a side x side RGB PNG, padded with an ancillary chunk.
"""
import hashlib
import struct
import zlib

# An 8x8 baseline JPEG (libvips, Q 75, stripped).
_JPEG = bytes.fromhex(
    "ffd8ffdb004300080606070605080707070909080a0c140d0c0b0b0c1912130f141d1a1f1e1d1a1c1c20242e2720"
    "222c231c1c2837292c30313434341f27393d38323c2e333432ffdb0043010909090c0b0c180d0d1832211c213232"
    "32323232323232323232323232323232323232323232323232323232323232323232323232323232323232323232"
    "3232ffc00011080008000803012200021101031101ffc4001f000001050101010101010000000000000000010203"
    "0405060708090a0bffc400b5100002010303020403050504040000017d0102030004110512213141061351610722"
    "7114328191a1082342b1c11552d1f02433627282090a161718191a25262728292a3435363738393a434445464748"
    "494a535455565758595a636465666768696a737475767778797a838485868788898a92939495969798999aa2a3a4"
    "a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2f3"
    "f4f5f6f7f8f9faffc4001f0100030101010101010101010000000000000102030405060708090a0bffc400b51100"
    "020102040403040705040400010277000102031104052131061241510761711322328108144291a1b1c109233352"
    "f0156272d10a162434e125f11718191a262728292a35363738393a434445464748494a535455565758595a636465"
    "666768696a737475767778797a82838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7"
    "b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae2e3e4e5e6e7e8e9eaf2f3f4f5f6f7f8f9faffda000c030100"
    "02110311003f009e8a28af903ea8ffd9")


def _stream(seed, count):
    out = bytearray()
    block = hashlib.sha256(seed).digest()
    while len(out) < count:
        out += block
        block = hashlib.sha256(block).digest()
    return bytes(out[:count])


def jpeg(seed, size):
    if isinstance(seed, str):
        seed = seed.encode()
    room = size - len(_JPEG)
    comments = bytearray()
    data = _stream(seed, max(0, room))
    offset = 0
    while room - len(comments) >= 4:
        take = min(65533, room - len(comments) - 4, len(data) - offset)
        if take < 0:
            break
        comments += b"\xff\xfe" + struct.pack(">H", take + 2) + data[offset:offset + take]
        offset += take
        if take == 0:
            break
    return _JPEG[:2] + bytes(comments) + _JPEG[2:]


def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(seed, size=0, side=8):
    if isinstance(seed, str):
        seed = seed.encode()
    h = hashlib.sha256(seed).digest()
    rows = bytearray()
    for y in range(side):
        rows.append(0)
        for x in range(side):
            t = (x + y) / (2 * side)
            rows += bytes(int(c * (0.55 + 0.45 * t)) for c in h[:3])
    head = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
    tail = _chunk(b"IDAT", zlib.compress(bytes(rows))) + _chunk(b"IEND", b"")
    room = size - len(head) - len(tail) - 12
    pad = _chunk(b"tpAd", _stream(seed, room)) if room > 0 else b""
    return head + pad + tail
