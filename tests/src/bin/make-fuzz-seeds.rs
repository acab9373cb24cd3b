//! Writes the seed corpora of the sequence fuzz targets (`capture`, `compaction`, `lifecycle`,
//! `auto_mode`) from their
//! typed definitions in `agentrun_tests::fuzz_seeds` to `fuzz/corpus/<target>/`, in the
//! encoding `arbitrary` decodes. Re-running it rewrites the same files; inputs found by
//! fuzzing, added beside them by hand, are left alone. The byte-level targets' seeds are
//! written by `scripts/make-fuzz-seeds.py`.
//!
//!     cargo run -p agentrun-tests --bin make-fuzz-seeds

use std::path::Path;

use agentrun_tests::fuzz_inputs::{Encode, encode};
use agentrun_tests::fuzz_seeds::{self, Seed};

fn write<T: Encode>(target: &str, seeds: &[Seed<T>]) -> std::io::Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    std::fs::create_dir_all(&dir)?;
    for (name, input) in seeds {
        std::fs::write(dir.join(name), encode(input))?;
    }
    println!("{}: {} seeds in {}", target, seeds.len(), dir.display());
    Ok(())
}

fn main() -> std::io::Result<()> {
    write("capture", &fuzz_seeds::capture())?;
    write("compaction", &fuzz_seeds::compaction())?;
    write("lifecycle", &fuzz_seeds::lifecycle())?;
    write("auto_mode", &fuzz_seeds::auto_mode())
}
