//! The sans-IO core driven by hand: no file, no process, no clock.
//!
//! 1. A capture machine is fed chunks of two streams and finished; its result record renders
//!    the bounded, model-facing preview with the exact hint for reading on.
//! 2. The run lifecycle decides a timeout's escalation on a virtual clock: the instants are
//!    made up, which is how every escalation path is tested without a process or a sleep.
//!
//! Run it with `cargo run -p agentrun-core --example sans_io`.

use std::time::{Duration, Instant};

use agentrun_core::lifecycle::{RunAction, RunLifecycle};
use agentrun_core::process::{Exit, RunOptions};
use agentrun_core::{
    Capture, CaptureStatus, OutputChannel, OutputDeclaration, PreviewLimits, ResultRecord,
    StreamName,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    capture()?;
    lifecycle()?;
    Ok(())
}

/// Output handling: 10 000 lines on stdout, one on stderr, a preview of 5 lines per stream.
fn capture() -> Result<(), Box<dyn std::error::Error>> {
    let declaration = OutputDeclaration::named(["stdout", "stderr"])?;
    let limits = PreviewLimits {
        max_lines: 5,
        ..PreviewLimits::default()
    };
    let mut capture = Capture::new(declaration, limits)?;
    let stdout = OutputChannel::Named(StreamName::new("stdout")?);
    let stderr = OutputChannel::Named(StreamName::new("stderr")?);
    let (out, err) = (capture.resolve(&stdout)?, capture.resolve(&stderr)?);
    let (out, err) = (
        out.ok_or("stdout undeclared")?,
        err.ok_or("stderr undeclared")?,
    );

    // Chunks arrive cut anywhere, as a pipe delivers them; the machine does not care.
    let text: String = (1..=10_000).map(|i| format!("line {i}\n")).collect();
    for chunk in text.as_bytes().chunks(4096) {
        capture.handle_chunk(out, chunk);
    }
    capture.handle_chunk(err, b"warning: something to look at\n");

    // A driver writes each stream's bytes and index to its store; here they are dropped.
    let summary = capture.finish(None, CaptureStatus::Succeeded);
    let record = ResultRecord::from_summary("example-run".to_owned(), &summary);
    println!("--- what a model sees ---\n{}", record.render());
    for (name, uri) in record.artifact_uris().iter() {
        println!("{name}: {uri}");
    }
    Ok(())
}

/// Timing policy: a 10 s deadline, a child that ignores SIGTERM, SIGKILL after the grace.
fn lifecycle() -> Result<(), Box<dyn std::error::Error>> {
    // The one clock read, by the example playing the driver; every later instant is made up.
    #[allow(
        clippy::disallowed_methods,
        reason = "the driver owns the clock, not the core"
    )]
    let start = Instant::now();
    let options = RunOptions::new("some-program")
        .timeout(Duration::from_secs(10))
        .kill_grace(Duration::from_secs(3));
    let mut run = RunLifecycle::new(&options, start)?;
    let mut now = start;
    println!("\n--- the run lifecycle on a virtual clock ---");
    loop {
        while let Some(action) = run.poll_action() {
            let at = show(now - start);
            match action {
                RunAction::Signal(signal) => println!("{at}: send {signal:?} to the group"),
                RunAction::Kill => {
                    println!("{at}: send SIGKILL to the group");
                    // The child dies of it at once; its pipes close with it.
                    run.handle_exit(now, Some(Exit::Signal(9)));
                    run.handle_pipes_closed(now);
                }
                RunAction::Finish { outcome, exit, .. } => {
                    println!("{at}: finished: {outcome:?}, child {exit:?}");
                    return Ok(());
                }
                other => println!("{at}: {other:?}"),
            }
        }
        // Nothing happens until the next instant the machine asked for: jump to it.
        let (next, reason) = run
            .poll_timeout()
            .ok_or("the lifecycle is waiting forever")?;
        now = next;
        println!("{}: wake up ({reason:?})", show(now - start));
        run.handle_timeout(now);
    }
}

fn show(d: Duration) -> String {
    format!("t+{:>4.1}s", d.as_secs_f64())
}
