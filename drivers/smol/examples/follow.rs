//! Runs a command on smol, printing its stdout live while it is captured, then prints the
//! bounded model view of the run. Ctrl-C is not needed here: the run has a 30 s timeout.
//!
//! ```text
//! cargo run -p agentrun-smol --example follow -- sh -c 'for i in 1 2 3; do echo step $i; sleep 0.3; done'
//! ```

use std::io::Write as _;
use std::time::Duration;

use agentrun_fs::Store;
use agentrun_smol::{RunOptions, Runner};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut argv = std::env::args_os().skip(1);
    let program = argv.next().unwrap_or_else(|| "ls".into());
    let store = Store::open(std::env::temp_dir().join("agentrun-example-store"))?;
    let runner = Runner::new(store);
    let options = RunOptions::new(program)
        .args(argv)
        .timeout(Duration::from_secs(30));
    let result = smol::block_on(async {
        runner
            .run(options)
            .observe_stdout(|chunk| {
                // The tap runs on the pump's thread, right after the chunk was captured.
                let _ = std::io::stderr().write_all(chunk);
            })
            .await
    })?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "--- outcome: {:?}, exit: {:?}",
        result.outcome, result.exit
    )?;
    writeln!(out, "{}", result.model_text())?;
    Ok(())
}
