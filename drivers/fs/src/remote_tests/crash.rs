//! SIGKILL of a publisher at every fault point, with a GC on another machine beside it.

use super::*;

/// The child of the crash test: publishes a fixed sequence to the bucket named by the
/// environment, and is killed at fault point N.
const CHILD_VAR: &str = "AGENTRUN_FS_REMOTE_CRASH";

/// Lines of the crash sequence's larger output: a few index blocks (its publication steps
/// are the same at any size below the multipart threshold, which its own tests cover).
const CRASH_LINES: u64 = 4_000;

#[test]
fn remote_crash_child() {
    let Some(store) = child_store(CHILD_VAR) else {
        return;
    };
    capture(&store, &lines(CRASH_LINES, "crash"));
    capture(&store, &lines(CRASH_LINES, "crash"));
    capture(&store, &lines(100, "small"));
}

/// GC in a loop on machine B (every object counting as old), until stopped.
struct Collector {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl Collector {
    fn start(b: Store) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut runs = 0;
                while !stop.load(Ordering::Relaxed) {
                    b.gc(&gc_later()).unwrap();
                    runs += 1;
                    // Leaves the server to the publisher between runs.
                    std::thread::sleep(Duration::from_millis(20));
                }
                runs
            })
        };
        Self { stop, thread }
    }

    /// Stops it; returns how many GCs ran.
    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Everything a crash must leave true of the bucket, seen from a machine of its own: verify
/// finds nothing wrong, and every stream of every record reads back whole.
fn check_bucket(bucket: &Bucket, home: &Path, at: u64, when: &str) {
    let c = bucket.machine(home);
    let report = c.verify().unwrap();
    assert!(
        report.is_healthy(),
        "fault {at}, {when}: {:?}",
        report.problems
    );
    for id in c.records().unwrap() {
        let record = c.record(&id).unwrap();
        let mut out = Vec::new();
        c.copy_to(&single_uri(&record), &mut out)
            .unwrap_or_else(|e| panic!("fault {at}, {when}: run {id}: {e}"));
        assert_eq!(
            Digest::of(&out),
            record.streams()[0].sha256,
            "fault {at}, {when}"
        );
    }
}

/// SIGKILL of a publisher (machine A, a child process) at every fault point in turn, with a
/// GC looping on machine B beside it throughout, every object counting as old to it: after
/// each crash the bucket is consistent (no record names a missing object), the GC has
/// deleted nothing a record or a live publication needs, and the sequence then runs to
/// completion on that bucket.
fn sigkill_at_every_step(make: fn() -> Bucket) {
    let exe = std::env::current_exe().unwrap();
    let mut at = 1u64;
    loop {
        let bucket = make();
        let (tmp, ha, hb) = homes();
        let (url, env) = bucket.url_and_env();
        let collector = Collector::start(bucket.machine(&hb));
        let out = Command::new(&exe)
            .args([
                "--exact",
                "remote_tests::crash::remote_crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_VAR, format!("{url}\n{}", ha.display()))
            .env(crate::fault::FAULT_AT_VAR, at.to_string())
            .envs(env)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            collector.stop();
            assert!(at > 10, "only {} fault points were reached", at - 1);
            eprintln!("crashed at each of {} fault points", at - 1);
            break;
        }
        assert!(
            stderr.contains(&format!("fault point {at}: ")),
            "the child died elsewhere: {stderr}"
        );
        check_bucket(&bucket, &tmp.path().join("c"), at, "after the crash");
        // Every run the crash left in the spool still waits for the bucket.
        let a = bucket.machine(&ha);
        assert_eq!(
            a.unpublished().unwrap(),
            a.local_only().records().unwrap(),
            "fault {at}: a spooled run without its mark"
        );
        // The sequence then runs to completion on that bucket (and that spool), GC beside it.
        capture(&a, &lines(CRASH_LINES, "crash"));
        capture(&a, &lines(100, "small"));
        let runs = collector.stop();
        assert!(runs > 0, "fault {at}: no GC ran beside the publisher");
        check_bucket(&bucket, &tmp.path().join("c"), at, "after the sequence");
        at += 1;
    }
}

#[test]
fn sigkill_of_a_publisher_at_every_step_leaves_the_bucket_consistent() {
    sigkill_at_every_step(Bucket::file);
}

/// The same on a real S3-API server.
#[test]
fn sigkill_of_a_publisher_at_every_step_leaves_an_s3_bucket_consistent() {
    sigkill_at_every_step(Bucket::s3);
}
