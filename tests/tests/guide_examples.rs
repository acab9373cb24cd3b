//! The library quick start of docs/guide.md (and the README), compiled and run: the same calls
//! on both drivers, against a temporary store and `echo` instead of `cargo build`.

use agentrun_core::PageRequest;
use agentrun_fs::Store;

#[test]
fn the_tokio_quick_start_runs() {
    use agentrun_tokio::{RunOptions, Runner};
    let tmp = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = Store::open(tmp.path().join("store")).unwrap();
        let runner = Runner::new(store.clone());
        let result = runner
            .run(RunOptions::new("echo").arg("built"))
            .await
            .unwrap();
        assert!(result.model_text().contains("built"));
        let stdout = result.stdout().expect("stdout is declared by default");
        let uri = result.record.stream_uri(stdout);
        assert!(uri.to_string().ends_with("/stdout"));
        let page = store.read_page(&uri, PageRequest::default()).unwrap();
        assert_eq!((page.lines, page.total_lines), (1, 1));
        assert_eq!(page.bytes, b"built\n");
    });
}

#[test]
fn the_smol_quick_start_runs() {
    use agentrun_smol::{RunOptions, Runner};
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("store")).unwrap();
    let runner = Runner::new(store.clone());
    let result = smol::block_on(
        runner
            .run(RunOptions::new("echo").arg("built"))
            .into_future(),
    )
    .unwrap();
    assert!(result.model_text().contains("built"));
    let stdout = result.stdout().expect("stdout is declared by default");
    let page = store
        .read_page(&result.record.stream_uri(stdout), PageRequest::default())
        .unwrap();
    assert_eq!(page.bytes, b"built\n");
}
