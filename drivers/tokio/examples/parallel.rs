//! Runs several commands at once on tokio, then pages the first lines of each one's stdout
//! back from the store, without blocking the executor on the disk.
//!
//! ```text
//! cargo run -p agentrun-tokio --example parallel
//! ```

use std::io::Write as _;
use std::time::Duration;

use agentrun_core::{ArtifactUri, PageRequest};
use agentrun_fs::Store;
use agentrun_tokio::{RunOptions, Runner};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = Store::open(std::env::temp_dir().join("agentrun-example-store"))?;
    let runner = Runner::new(store);
    let commands = [
        RunOptions::new("seq").args(["1", "100000"]),
        RunOptions::new("uname").arg("-a"),
        RunOptions::new("sleep")
            .arg("10")
            .timeout(Duration::from_millis(500)),
    ];
    let tasks: Vec<_> = commands
        .into_iter()
        .map(|options| {
            let runner = runner.clone();
            tokio::spawn(async move { runner.run(options).await })
        })
        .collect();
    for task in tasks {
        let result = task.await??;
        let Some(stdout) = result.stdout() else {
            continue;
        };
        let uri = ArtifactUri::new(stdout.sha256);
        let page = runner.read_page(&uri, PageRequest::new(0, 3)?).await?;
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "{uri} ({:?}, exit {:?}), lines 0..{} of {}:",
            result.outcome, result.exit, page.lines, page.total_lines
        )?;
        out.write_all(&page.bytes)?;
    }
    Ok(())
}
