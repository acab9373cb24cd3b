//! Benchmarks of the process drivers (results in docs/benchmarks.md).
//!
//! ```text
//! cargo run --release -p agentrun-tests --example driver_bench -- spawn [RUNS]
//! cargo run --release -p agentrun-tests --example driver_bench -- capture FILE [RUNS]
//! cargo run --release -p agentrun-tests --example driver_bench -- watchdog [RUNS]
//! ```
//!
//! `spawn`: median wall time per run of `true` through `std::process::Command::output()`,
//! agentrun-smol and agentrun-tokio, in one process, interleaved so drift hits all alike.
//! `capture`: median wall time of `cat FILE` through each driver (full capture into a store).
//! `watchdog`: the per-run cost of guarding a run against the runner's death: `true` spawned
//! in a group of its own and waited for, without a watchdog, with a watchdog process of its
//! own (the earlier design: `/bin/sh` started after the spawn, told `done` and reaped after
//! the exit) and with the process-wide watchdog the runner uses (`Watchdog::start` after the
//! spawn, `stand_down` after the exit), interleaved run by run.

use std::path::Path;
use std::time::{Duration, Instant};

use agentrun_fs::Store;
use agentrun_smol::RunOptions;

/// The script of the watchdog each run had of its own before the runner shared one: on
/// `done` it exits, on end of file it stops the group.
const OWN_WATCHDOG_SCRIPT: &str = r#"read -r word
[ "$word" = done ] && exit 0
group=$1 grace=$2
shift 2
for sig in "$@"; do
    kill -s "$sig" -- "-$group" 2>/dev/null || exit 0
    sleep "$grace"
done
kill -s KILL -- "-$group" 2>/dev/null
"#;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let store = Store::open(tmp.path().join("store")).expect("a store");
    let smol_runner = agentrun_smol::Runner::new(store.clone());
    let tokio_runner = agentrun_tokio::Runner::new(store.clone());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let time = |f: &mut dyn FnMut()| {
        let t = Instant::now();
        f();
        t.elapsed()
    };
    match args.first().map(String::as_str) {
        Some("spawn") => {
            let runs: usize = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(200);
            let (mut std_t, mut smol_t, mut tokio_t) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..runs {
                std_t.push(time(&mut || {
                    let o = std::process::Command::new("true")
                        .output()
                        .expect("true runs");
                    assert!(o.status.success());
                }));
                smol_t.push(time(&mut || {
                    let r = smol::block_on(smol_runner.run(RunOptions::new("true")).into_future());
                    assert!(r.is_ok());
                }));
                tokio_t.push(time(&mut || {
                    let r = rt.block_on(tokio_runner.run(RunOptions::new("true")).into_future());
                    assert!(r.is_ok());
                }));
            }
            let (s, m, t) = (median(std_t), median(smol_t), median(tokio_t));
            println!("spawn of `true`, median of {runs} runs");
            println!("std Command::output   {:>8.3} ms", s.as_secs_f64() * 1e3);
            println!(
                "agentrun-smol         {:>8.3} ms  (+{:.3} ms)",
                m.as_secs_f64() * 1e3,
                (m.saturating_sub(s)).as_secs_f64() * 1e3
            );
            println!(
                "agentrun-tokio        {:>8.3} ms  (+{:.3} ms)",
                t.as_secs_f64() * 1e3,
                (t.saturating_sub(s)).as_secs_f64() * 1e3
            );
        }
        Some("capture") => {
            let file = Path::new(args.get(1).expect("capture FILE [RUNS]"));
            let runs: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(3);
            let size = std::fs::metadata(file).expect("the file exists").len();
            let options = || RunOptions::new("cat").arg(file);
            let (mut smol_t, mut tokio_t) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                smol_t.push(time(&mut || {
                    let r = smol::block_on(smol_runner.run(options()).into_future()).expect("runs");
                    assert_eq!(r.stdout().map(|s| s.bytes), Some(size));
                }));
                tokio_t.push(time(&mut || {
                    let r = rt
                        .block_on(tokio_runner.run(options()).into_future())
                        .expect("runs");
                    assert_eq!(r.stdout().map(|s| s.bytes), Some(size));
                }));
            }
            let mib = size as f64 / (1 << 20) as f64;
            println!(
                "capture of `cat {}` ({mib:.0} MiB), median of {runs} runs",
                file.display()
            );
            for (name, d) in [
                ("agentrun-smol ", median(smol_t)),
                ("agentrun-tokio", median(tokio_t)),
            ] {
                println!(
                    "{name}  {:>7.3} s  {:>6.0} MiB/s",
                    d.as_secs_f64(),
                    mib / d.as_secs_f64()
                );
            }
        }
        Some("watchdog") => {
            use std::os::unix::process::CommandExt;
            let runs: usize = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(200);
            let spawn_true = || {
                std::process::Command::new("true")
                    .process_group(0)
                    .spawn()
                    .expect("true runs")
            };
            // A watchdog of its own per run, started as the runner started it before (the same
            // script, arguments and standard streams): its cost is the fork and exec of the
            // shell, its read, and reaping it.
            let own_watchdog = |group: u32| {
                let (read, write) = std::io::pipe().expect("a pipe");
                let shell = std::process::Command::new("/bin/sh")
                    .args(["-c", OWN_WATCHDOG_SCRIPT, "agentrun-watchdog"])
                    .args([group.to_string().as_str(), "5.000", "TERM"])
                    .stdin(read)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .process_group(0)
                    .spawn()
                    .expect("/bin/sh starts");
                (write, shell)
            };
            let (mut without, mut own, mut shared) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..runs {
                without.push(time(&mut || {
                    let status = spawn_true().wait().expect("true is reaped");
                    assert!(status.success());
                }));
                own.push(time(&mut || {
                    use std::io::Write as _;
                    let mut child = spawn_true();
                    let (mut alarm, mut shell) = own_watchdog(child.id());
                    let status = child.wait().expect("true is reaped");
                    alarm.write_all(b"done\n").expect("the watchdog reads");
                    drop(alarm);
                    shell.wait().expect("the watchdog is reaped");
                    assert!(status.success());
                }));
                shared.push(time(&mut || {
                    let mut child = spawn_true();
                    let group = agentrun_process::os::group_of(Some(child.id()));
                    let watchdog = agentrun_process::os::Watchdog::start(
                        group,
                        &[agentrun_core::harness::StopSignal::Terminate],
                        Duration::from_secs(5),
                    )
                    .expect("/bin/sh starts");
                    let status = child.wait().expect("true is reaped");
                    watchdog.stand_down();
                    assert!(status.success());
                }));
            }
            let (a, b, c) = (median(without), median(own), median(shared));
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            println!("spawn and wait of `true`, median of {runs} runs");
            println!("without a watchdog          {:>8.3} ms", ms(a));
            for (name, d) in [
                ("a watchdog of its own  ", b),
                ("the process's watchdog", c),
            ] {
                println!(
                    "with {name}  {:>8.3} ms  (+{:.3} ms, {:.2}x)",
                    ms(d),
                    ms(d.saturating_sub(a)),
                    d.as_secs_f64() / a.as_secs_f64()
                );
            }
        }
        _ => eprintln!(
            "usage: driver_bench spawn [RUNS] | driver_bench capture FILE [RUNS] | \
             driver_bench watchdog [RUNS]"
        ),
    }
}
