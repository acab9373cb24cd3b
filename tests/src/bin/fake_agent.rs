//! A fake agent for the process-driver conformance suite (`tests/tests/conformance.rs`).
//!
//! * `fake_agent flood BYTES` writes BYTES deterministic pseudo-random bytes to stdout and,
//!   concurrently, BYTES others to stderr, as fast as the pipes take them.
//! * `fake_agent digests BYTES` prints the SHA-256 of both streams `flood BYTES` writes
//!   (stdout's, then stderr's, one per line) without writing them.

use std::io::{self, Write};
use std::process::ExitCode;

use sha2::{Digest, Sha256};

const CHUNK: usize = 1 << 20;

/// The stream's bytes, one 1 MiB chunk at a time: a block of xorshift64* output seeded per
/// stream, with newlines every 97 bytes, and the chunk's number stamped into its first 8
/// bytes (so a lost, repeated or reordered chunk changes the digest). Cheap per chunk, so a
/// debug build still writes gigabytes quickly.
fn generate(
    seed: u64,
    total: u64,
    mut sink: impl FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<()> {
    let mut state = seed;
    let mut buf = vec![0u8; CHUNK];
    for word in buf.chunks_exact_mut(8) {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        word.copy_from_slice(&state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    for i in (0..CHUNK).step_by(97) {
        buf[i] = b'\n';
    }
    let mut left = total;
    let mut number = 0u64;
    while left > 0 {
        buf[..8].copy_from_slice(&number.to_le_bytes());
        let n = usize::try_from(left.min(CHUNK as u64)).unwrap_or(CHUNK);
        sink(&buf[..n])?;
        left -= n as u64;
        number += 1;
    }
    Ok(())
}

const SEEDS: [u64; 2] = [0x9e37_79b9_7f4a_7c15, 0xd1b5_4a32_d192_ed03];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let bytes = args.get(2).and_then(|b| b.parse::<u64>().ok());
    let result = match (args.get(1).map(String::as_str), bytes) {
        (Some("flood"), Some(bytes)) => std::thread::scope(|s| {
            let err = s.spawn(move || {
                let mut err = io::stderr().lock();
                generate(SEEDS[1], bytes, |c| err.write_all(c))
            });
            let mut out = io::stdout().lock();
            let a = generate(SEEDS[0], bytes, |c| out.write_all(c));
            let b = err
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("stderr writer panicked")));
            a.and(b)
        }),
        (Some("digests"), Some(bytes)) => SEEDS.iter().try_for_each(|&seed| {
            let mut hash = Sha256::new();
            generate(seed, bytes, |c| {
                hash.update(c);
                Ok(())
            })?;
            let hex: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
            println!("{hex}");
            Ok(())
        }),
        _ => {
            eprintln!("usage: fake_agent flood BYTES | fake_agent digests BYTES");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fake_agent: {e}");
            ExitCode::FAILURE
        }
    }
}
