//! The spool of a shared store: runs whose publication failed, which bucket each waits for,
//! and how a store is known.

use super::*;

#[test]
fn a_run_whose_publication_failed_stays_in_the_spool_until_published() {
    // A bucket that does not exist yet: every request to it is refused.
    let name = format!("t{}-missing", std::process::id());
    let bucket = Bucket::S3 { name: name.clone() };
    let (_tmp, ha, hb) = homes();
    let (a, b) = (bucket.machine(&ha), bucket.machine(&hb));
    let content = lines(3_000, "later");
    let err = try_capture(&a, &content).unwrap_err();
    assert!(err.to_string().contains(&name), "{err}");
    let pending = a.unpublished().unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert!(
        matches!(&err, crate::StoreError::NotPublished { run_id, .. } if *run_id == pending[0]),
        "{err:?}"
    );
    // A local gc of the spool keeps it (its record is a root there).
    a.local_only().gc(&gc_later()).unwrap();
    moto().create_bucket(&name);
    assert!(b.records().unwrap().is_empty());
    // Another publisher of the run (its capture, say) holds it: left to that one.
    let other = std::fs::File::open(a.layout.record(&pending[0])).unwrap();
    other.lock().unwrap();
    assert!(!a.publish(&pending[0]).unwrap());
    assert!(b.records().unwrap().is_empty() && bucket_objects(&b).is_empty());
    drop(other);
    assert!(a.publish(&pending[0]).unwrap());
    assert!(a.unpublished().unwrap().is_empty());
    assert_eq!(b.records().unwrap(), pending);
    let record = b.record(&pending[0]).unwrap();
    let mut whole = Vec::new();
    b.copy_to(&single_uri(&record), &mut whole).unwrap();
    assert!(whole == content, "the published run reads back differently");
    assert!(b.verify().unwrap().is_healthy());
    // Published once: the spool no longer holds it.
    let again = a.publish(&pending[0]).unwrap_err();
    assert!(
        matches!(again, crate::StoreError::UnknownRun(_)),
        "{again:?}"
    );
    // A local store has nothing to publish.
    let local = Store::open(ha.join("local")).unwrap();
    assert!(local.unpublished().unwrap().is_empty());
    assert!(!local.discard_unpublished(&pending[0]).unwrap());
    // A run given up: its record leaves the spool, whose gc then collects its output.
    let gone = Bucket::S3 {
        name: format!("t{}-never", std::process::id()),
    };
    let c = gone.machine(&hb.join("c"));
    let lost = lines(2_000, "lost");
    assert!(try_capture(&c, &lost).is_err());
    let [run_id] = &c.unpublished().unwrap()[..] else {
        panic!("one unpublished run")
    };
    let held = std::fs::File::open(c.layout.record(run_id)).unwrap();
    held.lock().unwrap();
    assert!(
        !c.discard_unpublished(run_id).unwrap(),
        "a publisher holds it"
    );
    drop(held);
    assert!(c.discard_unpublished(run_id).unwrap());
    assert!(
        !c.layout.outbox_entry(run_id).exists(),
        "the mark went with the record"
    );
    assert!(c.unpublished().unwrap().is_empty());
    assert!(matches!(
        c.discard_unpublished(run_id),
        Err(crate::StoreError::UnknownRun(_))
    ));
    c.local_only().gc(&gc_later()).unwrap();
    assert!(!c.layout.object(&Digest::of(&lost)).exists());
}

/// The spool's home may also be a local store's, and the spool of other buckets: a bucket is
/// sent only the runs captured for it; the others are neither published to it nor given up
/// for it, and stay where they are.
#[test]
fn the_spool_sends_a_bucket_only_the_runs_captured_for_it() {
    let pid = std::process::id();
    let (x, y) = (format!("t{pid}-outbox-x"), format!("t{pid}-outbox-y"));
    let (_tmp, home, hb) = homes();
    let local = Store::open(&home).unwrap();
    let local_run = capture(&local, &lines(100, "local")).run_id;
    // Neither bucket exists yet: each run stays in the spool, waiting for its own.
    let sx = Bucket::S3 { name: x.clone() }.machine(&home);
    let sy = Bucket::S3 { name: y.clone() }.machine(&home);
    let pending = |err: crate::StoreError| match err {
        crate::StoreError::NotPublished { run_id, .. } => run_id,
        e => panic!("{e:?}"),
    };
    let run_x = pending(try_capture(&sx, &lines(200, "x")).unwrap_err());
    let run_y = pending(try_capture(&sy, &lines(300, "y")).unwrap_err());
    assert_eq!(sx.unpublished().unwrap(), std::slice::from_ref(&run_x));
    assert_eq!(sy.unpublished().unwrap(), std::slice::from_ref(&run_y));
    // The same bucket named with a trailing slash is the same store.
    let slash = open_s3(&format!("s3://{x}/team/agentrun/"), &home, &[]);
    assert_eq!(slash.unpublished().unwrap(), std::slice::from_ref(&run_x));
    moto().create_bucket(&x);
    let y_url = sy.remote.as_ref().unwrap().identity().to_owned();
    for (run, captured_for) in [(&local_run, None), (&run_y, Some(y_url))] {
        for result in [sx.publish(run), sx.discard_unpublished(run)] {
            let e = result.unwrap_err();
            let said = e.to_string();
            assert!(said.contains(&x) && said.contains(run.as_str()), "{said}");
            let crate::StoreError::NotWaitingForThisStore {
                run_id, waits_for, ..
            } = e
            else {
                panic!("{run}: {e:?}")
            };
            assert_eq!((&run_id, &waits_for), (run, &captured_for));
        }
    }
    assert!(sx.publish(&run_x).unwrap());
    assert!(
        !home.join("outbox").join(&run_x).exists(),
        "the mark went with the record"
    );
    assert_eq!(
        Bucket::S3 { name: x.clone() }
            .machine(&hb)
            .records()
            .unwrap(),
        std::slice::from_ref(&run_x)
    );
    assert!(sx.unpublished().unwrap().is_empty());
    // The others are where they were: the local run in the local store, Y's in the spool.
    assert_eq!(local.records().unwrap(), [local_run.clone(), run_y.clone()]);
    assert_eq!(sy.unpublished().unwrap(), std::slice::from_ref(&run_y));
    // Marks go with their records; one a crash left without its record is swept by gc.
    let outbox = home.join("outbox");
    std::fs::write(outbox.join("0000000000001-0000001-000000"), "s3://gone").unwrap();
    sx.gc(&gc_later()).unwrap();
    let marks: Vec<String> = std::fs::read_dir(&outbox)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(marks, std::slice::from_ref(&run_y));
    local.record(&local_run).unwrap();
    // A damaged mark may be this store's: its run is listed, and publishing it says why not.
    std::fs::write(outbox.join(&run_y), "garbage").unwrap();
    assert_eq!(sx.unpublished().unwrap(), std::slice::from_ref(&run_y));
    let damaged = sx.publish(&run_y).unwrap_err();
    assert!(
        matches!(damaged, crate::StoreError::CorruptOutboxMark { .. }),
        "{damaged:?}"
    );
    crate::outbox::mark(&sy.layout, &run_y, sy.remote.as_ref().unwrap().identity()).unwrap();
    // Only a run that waits for no store is adopted.
    let other = sx.adopt_unpublished(&run_y).unwrap_err();
    assert!(
        matches!(
            &other,
            crate::StoreError::NotWaitingForThisStore {
                waits_for: Some(_),
                ..
            }
        ),
        "{other:?}"
    );
    assert!(matches!(
        sx.adopt_unpublished("0000000000002-0000001-000000"),
        Err(crate::StoreError::UnknownRun(_))
    ));
    // A shared store's gc applies no retention to its spool: its records wait for a bucket
    // or are the local store's. The local store's gc forgets its own old runs, but never one
    // that has not reached its bucket.
    let expire = GcOptions {
        expire_records: Some(Duration::from_secs(1)),
        ..gc_later()
    };
    sx.gc(&expire).unwrap();
    assert_eq!(local.records().unwrap(), [local_run.clone(), run_y.clone()]);
    let report = local.gc(&expire).unwrap();
    assert_eq!(
        (report.records, report.records_expired),
        (1, 1),
        "{report:?}"
    );
    assert_eq!(local.records().unwrap(), std::slice::from_ref(&run_y));
    assert_eq!(sy.unpublished().unwrap(), std::slice::from_ref(&run_y));
    let mut whole = Vec::new();
    local
        .copy_to(&single_uri(&local.record(&run_y).unwrap()), &mut whole)
        .unwrap();
    assert!(whole == lines(300, "y"));
    // A run adopted by a store is then its to publish.
    let adopted = capture(&local, &lines(50, "adopted")).run_id;
    assert!(sx.unpublished().unwrap().is_empty());
    assert!(sx.adopt_unpublished(&adopted).unwrap());
    assert!(!sx.adopt_unpublished(&adopted).unwrap());
    assert_eq!(sx.unpublished().unwrap(), std::slice::from_ref(&adopted));
    assert!(sx.publish(&adopted).unwrap());
    assert!(local.record(&adopted).is_err());
}

/// A store is known by its URL, less what does not change it, and by where its bucket is: an
/// S3 endpoint, an Azure account. A URL longer than any store's is refused.
#[test]
fn a_store_is_known_by_its_url_and_where_its_bucket_is() {
    use crate::remote::store_identity;
    assert_eq!(
        store_identity("s3", "b/team//agentrun/", None),
        "s3://b/team/agentrun"
    );
    assert_eq!(store_identity("s3", "b", None), "s3://b");
    assert_eq!(store_identity("gs", "b/", Some("")), "gs://b");
    assert_eq!(store_identity("file", "/tmp//x/", None), "file:///tmp/x");
    assert_eq!(
        store_identity("az", "c/p", Some("acct")),
        "az://c/p at acct"
    );
    let (_tmp, home, _) = homes();
    let on_moto = open_s3("s3://b/p/", &home, &[]);
    assert_eq!(
        on_moto.remote.as_ref().unwrap().identity(),
        format!("s3://b/p at http://127.0.0.1:{}", moto().port)
    );
    let elsewhere = open_s3("s3://b/p", &home, &[("aws_endpoint", "http://127.0.0.1:1")]);
    assert_eq!(
        elsewhere.remote.as_ref().unwrap().identity(),
        "s3://b/p at http://127.0.0.1:1"
    );
    // The S3-only endpoint wins over the general one, as it does for the requests.
    let s3_only = open_s3(
        "s3://b/p",
        &home,
        &[("aws_endpoint_url_s3", "http://127.0.0.1:2")],
    );
    assert_eq!(
        s3_only.remote.as_ref().unwrap().identity(),
        "s3://b/p at http://127.0.0.1:2"
    );
    let err = Store::open_url("s3://b/p\nq", &home).unwrap_err();
    assert!(err.to_string().contains("control characters"), "{err}");
    let long = format!("s3://b/{}", "p".repeat(crate::remote::MAX_IDENTITY_BYTES));
    let err = Store::open_url(&long, &home).unwrap_err();
    assert!(
        err.to_string().contains("is longer than 2048 bytes"),
        "{err}"
    );
}
