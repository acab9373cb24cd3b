//! The shared store on object storage from the command line: two `agentrun` processes with
//! different local homes on one bucket of a real S3-API server (moto's server mode, installed
//! by `scripts/install-moto.sh` when missing, started here on 127.0.0.1), configured the
//! standard way (`AGENTRUN_STORE` or `--store s3://…`, `AWS_*` variables).

use std::path::Path;
use std::process::{Command, Output, Stdio};

#[path = "support/moto.rs"]
mod moto;
use moto::Moto;

/// `agentrun ARGS` as a machine with local home `home`, configured by the environment.
fn agentrun(moto: &Moto, home: &Path, url: Option<&str>, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_agentrun"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("AGENTRUN_HOME", home.join("spool"));
    moto.configure(&mut c);
    c.args(args).stdin(Stdio::null());
    if let Some(url) = url {
        c.env("AGENTRUN_STORE", url);
    }
    c.output().unwrap()
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{o:?}");
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn one_machine_runs_and_another_pages_reads_lists_shows_verifies_and_collects() {
    let moto = Moto::start();
    moto.create_bucket("fleet");
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    let url = "s3://fleet/agentrun";
    let run = agentrun(
        &moto,
        &a,
        Some(url),
        &["run", "--json", "--", "seq", "1", "200000"],
    );
    let json: serde_json::Value = serde_json::from_str(&ok(&run)).unwrap();
    let run_id = json["run_id"].as_str().unwrap().to_owned();
    let uri = json["artifacts"]["stdout"].as_str().unwrap().to_owned();
    // The other machine, by --store instead of the variable.
    let runs = ok(&agentrun(&moto, &b, None, &["--store", url, "runs"]));
    assert!(runs.contains(&run_id), "{runs}");
    let page = ok(&agentrun(
        &moto,
        &b,
        Some(url),
        &["read", &uri, "--offset", "150000", "--limit", "3"],
    ));
    assert_eq!(page, "150001\n150002\n150003\n");
    let all = ok(&agentrun(&moto, &b, Some(url), &["read", &uri, "--all"]));
    let expected: String = (1..=200_000).map(|i| format!("{i}\n")).collect();
    assert!(all == expected, "read --all differs");
    let show = agentrun(&moto, &b, Some(url), &["show", &run_id]);
    assert!(ok(&show).starts_with("[stdout]\n1\n2\n"));
    ok(&agentrun(&moto, &b, Some(url), &["verify"]));
    ok(&agentrun(&moto, &b, Some(url), &["gc"]));
    // gc kept the run: it still reads on the first machine.
    let again = ok(&agentrun(
        &moto,
        &a,
        Some(url),
        &["read", &uri, "--offset", "199999"],
    ));
    assert_eq!(again, "200000\n");
}

#[test]
fn a_run_the_bucket_refused_is_published_later_by_agentrun_publish() {
    let moto = Moto::start();
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    // The bucket does not exist yet: the run is captured, its publication fails.
    let url = "s3://later/agentrun";
    let run = agentrun(&moto, &a, Some(url), &["run", "--", "seq", "1", "5000"]);
    assert!(!run.status.success(), "{run:?}");
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("later"), "{err}");
    assert!(
        err.contains("is complete in the local spool but could not be published")
            && err.contains("`agentrun publish` sends it"),
        "{err}"
    );
    // A run of the local store in the same home is not the bucket's.
    ok(&agentrun(&moto, &a, None, &["run", "--", "echo", "mine"]));
    let local_runs = || -> Vec<serde_json::Value> {
        let json = ok(&agentrun(&moto, &a, None, &["runs", "--json"]));
        serde_json::from_str::<serde_json::Value>(&json)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    };
    let before = local_runs();
    assert_eq!(
        before.len(),
        2,
        "the local run and the spooled one: {before:?}"
    );
    let mine = before
        .iter()
        .find(|r| r.to_string().contains("echo"))
        .unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    moto.create_bucket("later");
    assert!(!ok(&agentrun(&moto, &b, Some(url), &["runs", "--json"])).contains("seq"));
    let publish = agentrun(&moto, &a, Some(url), &["publish", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&ok(&publish)).unwrap();
    let published = json["published"].as_array().unwrap();
    assert_eq!(published.len(), 1, "{json}");
    assert_eq!(json["failed"].as_array().unwrap().len(), 0, "{json}");
    let run_id = published[0].as_str().unwrap();
    // The local run stays in the local store, and is not given up for the bucket either.
    let left = local_runs();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0]["run_id"], mine.as_str());
    let refused = agentrun(&moto, &a, Some(url), &["publish", "--discard", &mine]);
    assert_eq!(refused.status.code(), Some(125), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("it is a run of the local store there"),
        "{said}"
    );
    assert_eq!(local_runs().len(), 1);
    // Adopted, it is the bucket's: published and gone from the local store.
    let adopted = agentrun(
        &moto,
        &a,
        Some(url),
        &["publish", "--adopt", &mine, "--json"],
    );
    let json: serde_json::Value = serde_json::from_str(&ok(&adopted)).unwrap();
    assert_eq!(json["published"], serde_json::json!([mine]), "{json}");
    assert!(local_runs().is_empty());
    ok(&agentrun(&moto, &b, Some(url), &["show", &mine]));
    // The other machine lists it and reads it whole.
    let show = ok(&agentrun(&moto, &b, Some(url), &["show", run_id]));
    assert!(show.starts_with("[stdout]\n1\n2\n"), "{show}");
    ok(&agentrun(&moto, &b, Some(url), &["verify"]));
    // Nothing left to publish.
    let again = agentrun(&moto, &a, Some(url), &["publish"]);
    ok(&again);
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(
        said.contains("every run captured for s3://later/agentrun is in it"),
        "{said}"
    );
    // A run to a bucket that never comes: given up by --discard.
    let never = "s3://never/agentrun";
    let run = agentrun(&moto, &a, Some(never), &["run", "--", "seq", "1", "10"]);
    assert!(!run.status.success(), "{run:?}");
    let failed = agentrun(&moto, &a, Some(never), &["publish", "--json"]);
    assert_eq!(failed.status.code(), Some(1), "{failed:?}");
    let json: serde_json::Value = serde_json::from_slice(&failed.stdout).unwrap();
    let run_id = json["failed"][0]["run_id"].as_str().unwrap().to_owned();
    let discard = agentrun(&moto, &a, Some(never), &["publish", "--discard", &run_id]);
    ok(&discard);
    assert!(String::from_utf8_lossy(&discard.stderr).contains(&format!("discarded {run_id}")));
    ok(&agentrun(&moto, &a, Some(never), &["publish"]));
    let again = agentrun(&moto, &a, Some(never), &["publish", "--discard", &run_id]);
    assert!(!again.status.success(), "{again:?}");
    assert!(String::from_utf8_lossy(&again.stderr).contains("holds no unpublished run"));
}
