//! Rendering a preview costs time proportional to the preview, not to the stream.
//!
//! `cargo bench -p agentrun-core --bench render` finalizes captures of 1 MiB, 64 MiB and
//! 1 GiB streams (set up once, outside the measurement) and measures only
//! `ResultRecord::from_summary` + `render`: the times should be equal across stream sizes.

use agentrun_core::capture::Capture;
use agentrun_core::stream::{OutputChannel, OutputDeclaration};
use agentrun_core::{CaptureStatus, PreviewLimits, ResultRecord};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

fn summary_of(stream_bytes: usize) -> agentrun_core::CaptureSummary {
    let limits = PreviewLimits {
        tail_lines: 50,
        ..Default::default()
    };
    let mut capture = Capture::new(OutputDeclaration::Single, limits).expect("valid limits");
    let line: Vec<u8> = b"2026-11-30T05:00:00Z INFO worker processed item status=ok\n".repeat(1024);
    let stream = capture
        .resolve(&OutputChannel::Single)
        .expect("declared")
        .expect("no fault");
    let mut fed = 0;
    while fed < stream_bytes {
        capture.handle_chunk(stream, &line);
        while capture.poll_index_entry(stream).is_some() {}
        fed += line.len();
    }
    capture.finish(None, CaptureStatus::Succeeded)
}

fn render(c: &mut Criterion) {
    let mut group = c.benchmark_group("from_summary+render");
    for mib in [1usize, 64, 1024] {
        let summary = summary_of(mib << 20);
        group.bench_with_input(
            BenchmarkId::from_parameter(format!("{mib}MiB")),
            &summary,
            |b, s| b.iter(|| ResultRecord::from_summary("bench".into(), s).render().len()),
        );
    }
    group.finish();
}

criterion_group!(benches, render);
criterion_main!(benches);
