#!/usr/bin/env python3
"""Writes the seed corpora of the byte-level fuzz targets to fuzz/corpus/<target>/.

Each seed is a small meaningful input in the byte layout documented in
tests/src/fuzz_bodies.rs (keep the two in step). Seeds are named for what they exercise, so a
failing replay in tests/tests/fuzz_corpus_replay.rs says which case broke. Re-running the
script rewrites the same files; inputs found by fuzzing are added beside them by hand.

The sequence targets (capture, compaction) decode a structured input with `arbitrary`; their
seeds are typed values in tests/src/fuzz_seeds.rs, written by
`cargo run -p agentrun-tests --bin make-fuzz-seeds`.
"""

import hashlib
import pathlib
import struct
import zlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "fuzz" / "corpus"
NAME_BYTES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"
DIGEST = hashlib.sha256(b"abc").hexdigest()


def write(target, name, data):
    path = ROOT / target / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


# --- uri ------------------------------------------------------------------------------------

URIS = {
    "valid-bare": f"artifact://{DIGEST}",
    "valid-stream": f"artifact://{DIGEST}/stdout",
    "valid-name-64": f"artifact://{DIGEST}/" + "n" * 64,
    "name-65": f"artifact://{DIGEST}/" + "n" * 65,
    "uppercase": f"artifact://{DIGEST.upper()}",
    "short-digest": f"artifact://{DIGEST[:63]}",
    "trailing-slash": f"artifact://{DIGEST}/",
    "extra-segment": f"artifact://{DIGEST}/stdout/x",
    "query-fragment": f"artifact://{DIGEST}?x=1#f",
    "percent": f"artifact://{DIGEST}/%2e%2e",
    "traversal": f"artifact://{DIGEST}/..",
    "whitespace": f"artifact://{DIGEST}/std out",
    "internal-form": f"artifact://sha256/{DIGEST}",
    "non-ascii-name": f"artifact://{DIGEST}/r\u00e9sultats",
    "multibyte-digest": "artifact://" + "\u00e9" * 32,
}


# --- preview --------------------------------------------------------------------------------


def name_field(name):
    """A custom stream name: length byte L with 1 + L % 64 == len(name), then mapped bytes."""
    if name is None:
        return b"\x00"
    length = len(name) - 1 or 64
    return bytes([length]) + bytes(NAME_BYTES.index(c) for c in name.encode())


def chunk(stream, data, repeat=1):
    assert len(data) <= 255 and 1 <= repeat <= 32
    return bytes([0, stream, repeat - 1, len(data)]) + data


def foreign(named, data):
    return bytes([2, int(named), len(data)]) + data


def display(text):
    data = text.encode()
    return bytes([3, len(data)]) + data


def preview_seed(ops, *, max_lines=50, max_bytes=4096, tail=0, payload_extra=0, status=0,
                 names=(), pages=(2000,)):
    head = bytes([max_lines - 1]) + struct.pack("<H", max_bytes - 1)
    head += bytes([tail]) + struct.pack("<H", payload_extra) + bytes([status, len(names)])
    for name in names:
        head += name_field(name)
    head += bytes([len(pages) - 1]) + b"".join(struct.pack("<H", p - 1) for p in pages)
    return head + b"".join(ops)


def split_every_byte(stream, data):
    return [chunk(stream, data[i:i + 1]) for i in range(len(data))]


LINES40 = b"".join(b"line %d\n" % i for i in range(40))
MULTI = "a\u00e9\u20ac\U0001F600\n".encode() * 3
PREVIEWS = {
    "single-untruncated": preview_seed([chunk(0, b"hello\nworld\n")]),
    "single-line-limit": preview_seed([chunk(0, LINES40[:200])], max_lines=2, pages=(1, 3)),
    "cut-line-reread": preview_seed([chunk(0, b"ab\ncdefgh\n")], max_bytes=5),
    "multibyte-split-every-byte": preview_seed(split_every_byte(0, MULTI), max_bytes=7),
    "invalid-utf8-incomplete-end": preview_seed([chunk(0, b"ok\xff\xfe\n\xc3\xa9\xe2\x82")],
                                                max_bytes=6),
    "crlf-no-final-newline": preview_seed([chunk(0, b"a\r\nb\r\n\r\nlast")], max_lines=2),
    "long-line-over-max-bytes": preview_seed([chunk(0, b"x" * 200, repeat=32), chunk(0, b"\nend")],
                                             max_bytes=4096, pages=(1,)),
    "stdout-stderr-interleaved": preview_seed(
        [chunk(0, b"o1\n"), display("working\u2026"), chunk(1, b"e1\n"), chunk(0, b"o2\n"),
         display("done")],
        max_lines=1, names=("stdout", "stderr")),
    "eight-custom-streams-tail": preview_seed(
        [chunk(i, LINES40[: 30 * (i + 1)], repeat=4) for i in range(8)],
        max_lines=3, max_bytes=300, tail=3, names=tuple(f"res.{i}_x-Y" for i in range(8)),
        pages=(7, 1)),
    "empty-named-streams": preview_seed([display("nothing")], names=("results", "diagnostics")),
    "foreign-chunks-rejected": preview_seed(
        [chunk(0, b"kept\n"), foreign(True, b"undeclared\n"), foreign(False, b"unnamed\n")],
        names=("results",)),
    "failed-with-tail": preview_seed([chunk(0, LINES40[:150]), chunk(0, LINES40[150:])], max_lines=4,
                                     tail=5, status=1),
    "payload-bound-eight-streams": preview_seed(
        [chunk(i, ("\u20ac" * 80).encode(), repeat=32) for i in range(8)],
        max_bytes=4096, status=2, names=tuple(None for _ in range(8))),
}


# --- page -----------------------------------------------------------------------------------


def page_seed(content, *, offset=0, limit=2000, byte_offset=0, byte_limit=16, feed=1,
              block=4, raw_offset=None, raw_byte_offset=None):
    flags = (raw_offset is not None) | ((raw_byte_offset is not None) << 1)
    out = bytes([flags])
    out += struct.pack("<Q", raw_offset) if raw_offset is not None else struct.pack("<H", offset)
    out += struct.pack("<H", limit)
    if raw_byte_offset is not None:
        out += struct.pack("<Q", raw_byte_offset)
    else:
        out += struct.pack("<H", byte_offset)
    out += struct.pack("<I", byte_limit) + bytes([feed - 1, block - 1])
    return out + content


def index_header(content, block_size):
    newlines = content.count(b"\n")
    unterminated = int(bool(content) and not content.endswith(b"\n"))
    blocks = -(-len(content) // block_size)
    out = b"AGRIDX01" + struct.pack("<IIQQQ", block_size, unterminated, len(content), newlines,
                                    blocks)
    out += hashlib.sha256(content).digest() + b"\x00" * 4
    return out + struct.pack("<I", zlib.crc32(out))


def index_entry(block, newlines_before, crc):
    fields = struct.pack("<QI", newlines_before, crc)
    return fields + struct.pack("<I", zlib.crc32(struct.pack("<Q", block) + fields))


def manifest():
    entries = [
        ("stdout", hashlib.sha256(b"a\n").hexdigest(), 2, 1),
        ("stderr", hashlib.sha256(b"").hexdigest(), 0, 0),
    ]
    streams = ",".join(
        f'{{"name":"{n}","sha256":"{d}","bytes":{b},"lines":{lines}}}' for n, d, b, lines in entries)
    return f'{{"format":"agentrun.manifest.v1","streams":[{streams}]}}'.encode()


PAGES = {
    "first-two-lines": page_seed(b"a\nbb\nccc\nd", limit=2),
    "crlf-middle": page_seed(b"a\r\nbb\r\nccc\r\n", offset=2, limit=1, feed=2),
    "offset-at-end": page_seed(b"one\ntwo", offset=2, byte_offset=7),
    "offset-past-end-raw": page_seed(b"x\n", raw_offset=2**64 - 1, raw_byte_offset=2**64 - 1),
    "limit-zero": page_seed(b"x\ny\n", limit=0, byte_limit=0),
    "limit-2001": page_seed(b"x\ny\n", limit=2001, byte_limit=2 * 1024 * 1024 + 1),
    "empty-content": page_seed(b""),
    "invalid-and-multibyte": page_seed(b"\xff\xfe\n\xc3\xa9\n\xe2\x82\xac\xf0\x9f", offset=1,
                                       byte_offset=4, byte_limit=3, feed=3),
    "long-lines-small-blocks": page_seed(b"x" * 300 + b"\n" + b"y" * 300 + b"\nz", offset=1,
                                         block=7, feed=13),
    "many-short-lines": page_seed(b"\n" * 200, offset=150, limit=30, block=16),
    "valid-manifest": manifest(),
    "valid-index-header": index_header(b"one\ntwo\nthree", 4),
    "valid-index-entry-block0": index_entry(0, 0, zlib.crc32(b"one\n")),
}


# --- transcript -----------------------------------------------------------------------------
# Transcript documents in the Messages shape (docs/compaction.md).
def transcript(messages, **top):
    import json
    doc = dict(top, messages=messages)
    return json.dumps(doc, separators=(",", ":")).encode()


def tool_use(id, name, input):
    return {"type": "tool_use", "id": id, "name": name, "input": input}


def tool_result(id, content, **extra):
    return dict({"type": "tool_result", "tool_use_id": id, "content": content}, **extra)


TRANSCRIPTS = {
    "artifact-read-and-bash": transcript([
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": [
            tool_use("a", "bash", {"command": "make"}),
            tool_use("b", "read", {"filePath": f"artifact://{DIGEST}/stdout", "offset": 0}),
        ]},
        {"role": "user", "content": [
            tool_result("a", "error: x"),
            tool_result("b", [{"type": "text", "text": "page"}], metadata={"lines": 1}),
        ]},
        {"role": "assistant", "content": "done"},
    ], summary="before", recent_start=3),
    "ordinary-reads": transcript([
        {"role": "assistant", "content": [
            tool_use("a", "read", {"filePath": "/etc/hosts"}),
            tool_use("b", "read", f'{{"filePath":"artifact://{DIGEST}"}}'),
            tool_use("c", "cat", {"filePath": f"artifact://{DIGEST}"}),
            tool_use("d", "read", {"filePath": "artifact://bad"}),
        ]},
        {"role": "user", "content": [tool_result(i, "out " + i) for i in "abcd"]},
    ]),
    "existing-artifacts": transcript([
        {"role": "assistant", "content": [tool_use("a", "bash", {})]},
        {"role": "user", "content": [tool_result("a", "head", is_error=True,
                                                  artifacts=[f"artifact://{DIGEST}/stderr"])]},
    ]),
    "unknown-blocks": transcript([
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t"},
                                          {"type": "image", "source": {}}]},
    ]),
    "bare-array": b'[{"role":"user","content":"hi"}]',
    "split-pair": transcript([
        {"role": "assistant", "content": [tool_use("a", "bash", {})]},
        {"role": "user", "content": [tool_result("a", "x")]},
    ], recent_start=1),
}


def main():
    for name, uri in URIS.items():
        write("uri", name, uri.encode())
    for name, data in PREVIEWS.items():
        write("preview", name, data)
    for name, data in PAGES.items():
        write("page", name, data)
    for name, data in TRANSCRIPTS.items():
        write("transcript", name, data)


if __name__ == "__main__":
    main()
