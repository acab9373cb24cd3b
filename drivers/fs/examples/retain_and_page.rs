//! The store end to end, without a process: retain an output, show the bounded preview a model
//! would see, then page the whole artifact back exactly by following the continuation offsets.
//!
//! Run it with `cargo run -p agentrun-fs --example retain_and_page` (the store is a temporary
//! directory, removed at the end).

use agentrun_core::{
    CaptureCompletion, CaptureStatus, OutputChannel, OutputDeclaration, PageRequest, PreviewLimits,
};
use agentrun_fs::Store;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path().join("store"))?;

    // One single-output capture: chunks are written to disk before the core counts them.
    let limits = PreviewLimits {
        max_lines: 3,
        ..PreviewLimits::default()
    };
    let mut capture = store.begin_capture(OutputDeclaration::Single, limits)?;
    let original: String = (1..=25).map(|i| format!("result row {i}\n")).collect();
    for chunk in original.as_bytes().chunks(100) {
        capture.write_channel(&OutputChannel::Single, chunk)?;
    }
    let record = capture.finish(CaptureCompletion::Streamed {
        display: None,
        status: CaptureStatus::Succeeded,
    })?;
    println!("--- preview ---\n{}\n", record.render());

    // Follow the continuation to the end, ten lines a page.
    let uri = record.output_uri();
    let mut paged = Vec::new();
    let mut offset = 0;
    loop {
        let page = store.read_page(&uri, PageRequest::new(offset, 10)?)?;
        println!(
            "--- page at line {offset} ---\n{}",
            page.to_model_text(&uri)
        );
        paged.extend_from_slice(&page.bytes);
        match page.next_offset {
            Some(next) => offset = next,
            None => break,
        }
    }
    assert_eq!(
        paged,
        original.as_bytes(),
        "paging returns the output exactly"
    );
    println!("\npaged {} bytes back from {uri}, identical", paged.len());
    Ok(())
}
