use std::collections::BTreeSet;
use std::sync::Arc;

use base64::Engine as _;

use super::tokens::{self, hash, hex, mint, parse};
use super::*;
use crate::promql::{Engine, Value};
use crate::store::{Appender, Labels, MatchOp, Matcher, MemStore};

#[test]
fn sha256_matches_the_standard_vector() {
    assert_eq!(
        hex(&hash("abc")),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert!(tokens::ct_eq(&hash("x"), &hash("x")));
    assert!(!tokens::ct_eq(&hash("x"), &hash("y")));
}

#[test]
fn token_file_parses_roles_users_and_comments() {
    let h = |s: &str| hex(&hash(s));
    let text = format!(
        "# canopy tokens\n\nsha256:{} admin\nsha256:{} scheduler # the scheduler\n  sha256:{} user alice\nSHA256:{} user bob\n",
        h("a"),
        h("s"),
        h("u"),
        h("b").to_uppercase()
    );
    let text = text.replace("SHA256:", "sha256:");
    let e = parse(&text).expect("valid file");
    let access: Vec<Access> = e.iter().map(|x| x.access.clone()).collect();
    assert_eq!(
        access,
        vec![
            Access::Admin,
            Access::Scheduler,
            Access::User("alice".into()),
            Access::User("bob".into())
        ]
    );
    assert_eq!(e[2].line(), format!("sha256:{} user alice", h("u")));
    let set = TokenSet::new(e);
    assert_eq!(set.lookup("u"), Some(Access::User("alice".into())));
    assert_eq!(set.lookup("b"), Some(Access::User("bob".into())));
    assert_eq!(set.lookup("a"), Some(Access::Admin));
    assert_eq!(set.lookup("nope"), None);
    assert_eq!(set.lookup(""), None);
    assert_eq!(set.lookup(&"u".repeat(tokens::MAX_TOKEN_LEN + 1)), None);
}

#[test]
fn malformed_token_lines_are_errors_with_their_line() {
    let ok = hex(&hash("t"));
    for (text, want) in [
        ("plaintext-secret admin".to_string(), "sha256:"),
        (format!("sha256:{} admin", &ok[..60]), "64 hex"),
        (format!("sha256:{}zz admin", &ok[..62]), "64 hex"),
        (format!("sha256:{ok}"), "missing role"),
        (format!("sha256:{ok} root"), "unknown role"),
        (format!("sha256:{ok} user"), "needs the user name"),
        (format!("sha256:{ok} admin alice"), "only user tokens"),
        (format!("sha256:{ok} user alice extra"), "too many fields"),
        (format!("sha256:{ok} admin\nsha256:{ok} user bob"), "twice"),
    ] {
        let e = parse(&text).expect_err(&text).to_string();
        assert!(e.contains(want), "{text:?}: {e}");
        assert!(e.contains("line "), "{e}");
    }
}

#[test]
fn user_names_that_would_change_meaning_in_the_file_are_refused() {
    for bad in ["", "a b", "a#b", "a\tb", "a\u{7}"] {
        assert!(!tokens::valid_user(bad), "{bad:?}");
    }
    for good in ["alice", "o'brien", "jean-luc", "用户"] {
        assert!(tokens::valid_user(good), "{good:?}");
    }
}

#[test]
fn minted_tokens_verify_and_differ() {
    let (s1, e1) = mint(Access::User("alice".into())).expect("mint");
    let (s2, e2) = mint(Access::Admin).expect("mint");
    assert_ne!(s1, s2);
    assert!(s1.starts_with(tokens::SECRET_PREFIX) && s1.len() == 7 + 64);
    assert!(
        !e1.line().contains(&s1),
        "the line holds the hash, not the secret"
    );
    let set = TokenSet::new(parse(&format!("{}\n{}\n", e1.line(), e2.line())).expect("parse"));
    assert_eq!(set.lookup(&s1), Some(Access::User("alice".into())));
    assert_eq!(set.lookup(&s2), Some(Access::Admin));
}

#[test]
fn credentials_bearer_and_basic_with_the_token_as_password() {
    let (secret, entry) = mint(Access::Scheduler).expect("mint");
    let auth = Auth::with_tokens(TokenSet::new(vec![entry]));
    let bearer = format!("Bearer {secret}");
    assert_eq!(
        auth.check(Some(bearer.as_bytes())).ok(),
        Some(Access::Scheduler)
    );
    let lower = format!("bearer  {secret} ");
    assert_eq!(
        auth.check(Some(lower.as_bytes())).ok(),
        Some(Access::Scheduler)
    );
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("grafana:{secret}"));
    let basic = format!("Basic {b64}");
    assert_eq!(
        auth.check(Some(basic.as_bytes())).ok(),
        Some(Access::Scheduler)
    );
    assert!(matches!(auth.check(None), Err(AuthError::Missing)));
    for bad in [
        "Bearer nope".to_string(),
        secret.clone(),
        format!("Token {secret}"),
        "Basic !!!".to_string(),
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(&secret)
        ),
    ] {
        assert!(
            matches!(auth.check(Some(bad.as_bytes())), Err(AuthError::Invalid)),
            "{bad}"
        );
    }
    assert_eq!(Auth::open().check(None).ok(), Some(Access::Admin));
}

#[test]
fn roles_are_ordered() {
    assert!(Access::Admin.require(Role::Admin, "x").is_ok());
    assert!(Access::Scheduler.require(Role::User, "x").is_ok());
    let e = Access::Scheduler
        .require(Role::Admin, "write")
        .expect_err("scheduler is not admin");
    assert!(matches!(e, AuthError::Forbidden { .. }));
    assert!(
        Access::User("a".into())
            .require(Role::Scheduler, "x")
            .is_err()
    );
}

/// alice and bob each run a job; node data has no `user` label.
fn store() -> Arc<dyn crate::store::Querier + Send + Sync> {
    let mut s = MemStore::new();
    for i in 0..=30 {
        let t = i * 10_000;
        let mut put = |l: Labels, v: f64| s.append(None, &l, t, v).expect("append");
        put(
            Labels::metric(
                "canopy_job_cpu_seconds_total",
                [("job_id", "1"), ("user", "alice"), ("node", "n1")],
            ),
            i as f64,
        );
        put(
            Labels::metric(
                "canopy_job_cpu_seconds_total",
                [("job_id", "2"), ("user", "bob"), ("node", "n1")],
            ),
            i as f64 * 100.0,
        );
        put(
            Labels::metric(
                "canopy_job_memory_bytes",
                [("job_id", "1"), ("user", "alice")],
            ),
            1e9,
        );
        put(Labels::metric("canopy_node_load1", [("node", "n1")]), 3.0);
        put(Labels::metric("up", [("node", "n1")]), 1.0);
        put(
            Labels::metric(
                "canopy_job_cpus_allocated",
                [("job_id", "3"), ("user", "alicex")],
            ),
            4.0,
        );
    }
    Arc::new(s)
}

fn vector(q: &dyn crate::store::Querier, expr: &str) -> Vec<Labels> {
    match Engine::default().instant(q, expr, 300_000).expect(expr) {
        Value::Vector(v) => v.into_iter().map(|s| s.labels).collect(),
        Value::Scalar { .. } => Vec::new(),
        other => panic!("{expr}: {other:?}"),
    }
}

#[test]
fn a_user_sees_only_series_with_their_user_label() {
    let all = store();
    let alice = Access::User("alice".into()).querier(&all);
    let users = |ls: &[Labels]| -> BTreeSet<String> {
        ls.iter()
            .map(|l| l.get("user").unwrap_or("<none>").to_string())
            .collect()
    };
    let only_alice: BTreeSet<String> = ["alice".to_string()].into();
    // Every way of widening a selector still ends at alice's series.
    for q in [
        r#"{__name__=~".+"}"#,
        r#"{user=~".+"}"#,
        r#"{user=~"alice|bob"}"#,
        r#"{user=~"alice.*"}"#,
        r#"{user!="alice", __name__=~".+"}"#,
        r#"{user="", __name__=~".+"}"#,
        r#"canopy_job_cpu_seconds_total"#,
        r#"canopy_job_cpu_seconds_total{user="bob"} or canopy_job_cpu_seconds_total"#,
        r#"label_replace(canopy_job_cpu_seconds_total{user="bob"}, "user", "alice", "", "")"#,
        r#"label_replace({__name__=~".+"}, "x", "$1", "user", "(.*)")"#,
        r#"{node="n1"}"#,
        r#"up"#,
        r#"canopy_node_load1"#,
    ] {
        let ls = vector(alice.as_ref(), q);
        let u = users(&ls);
        assert!(u.is_empty() || u == only_alice, "{q}: {u:?}");
    }
    // What alice does see is hers, whole.
    assert_eq!(vector(alice.as_ref(), r#"{__name__=~".+"}"#).len(), 2);
    assert_eq!(
        vector(alice.as_ref(), "up").len(),
        0,
        "node data is not hers"
    );
    let sum = |q: &dyn crate::store::Querier| match Engine::default()
        .instant(q, "sum(canopy_job_cpu_seconds_total)", 300_000)
        .expect("sum")
    {
        Value::Vector(v) => v.first().map(|s| s.v),
        _ => None,
    };
    assert_eq!(sum(alice.as_ref()), Some(30.0), "bob's 3000 is not added");
    assert_eq!(sum(all.as_ref()), Some(3030.0));
    // The metadata path (series without samples' values) is scoped too.
    let any = [Matcher {
        name: "__name__".into(),
        op: MatchOp::NotEqual(String::new()),
    }];
    let ls = alice.series(&any, 0, 300_000, 1000).expect("series");
    assert_eq!(users(&ls), only_alice);
    assert_eq!(all.series(&any, 0, 300_000, 1000).expect("series").len(), 6);
    // An empty user name sees nothing at all.
    let nobody = ScopedQuerier::new(Arc::clone(&all), "");
    assert!(
        nobody
            .series(&any, 0, 300_000, 1000)
            .expect("series")
            .is_empty()
    );
    // Others see only their own.
    let bob = Access::User("bob".into()).querier(&all);
    assert_eq!(
        users(&vector(bob.as_ref(), r#"{__name__=~".+"}"#)),
        ["bob".to_string()].into()
    );
    // Scheduler and admin see everything.
    assert_eq!(
        Access::Scheduler
            .querier(&all)
            .series(&any, 0, 300_000, 1000)
            .expect("s")
            .len(),
        6
    );
}

#[tokio::test]
async fn the_http_guard_answers_401_403_and_scopes_every_handler() {
    use axum::body::Body;
    use axum::http::{Request, StatusCode, header};
    use tower::ServiceExt;

    let (user, ue) = mint(Access::User("alice".into())).expect("mint");
    let (sched, se) = mint(Access::Scheduler).expect("mint");
    let mut st = crate::api::http::ApiState::new(store(), Arc::new(Engine::default()));
    st.now_ms = Arc::new(|| 300_000);
    st.auth = Auth::with_tokens(TokenSet::new(vec![ue, se]));
    let app = crate::api::http::router(st);
    let call = |uri: &str, token: Option<&str>| {
        let mut r = Request::get(uri);
        if let Some(t) = token {
            r = r.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = r.body(Body::empty()).expect("request");
        let app = app.clone();
        async move {
            let resp = app.oneshot(req).await.expect("answer");
            let status = resp.status();
            let challenge = resp.headers().contains_key(header::WWW_AUTHENTICATE);
            let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
                .await
                .expect("body");
            let text = String::from_utf8_lossy(&body).to_string();
            (status, challenge, text)
        }
    };
    let (s, challenge, body) = call("/api/v1/query?query=up", None).await;
    assert_eq!((s, challenge), (StatusCode::UNAUTHORIZED, true));
    assert!(body.contains("\"errorType\":\"unauthorized\""), "{body}");
    let (s, _, body) = call("/metrics", Some(&sched)).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert!(body.contains("\"errorType\":\"forbidden\""), "{body}");
    let sel = "%7B__name__%3D~%22.%2B%22%7D";
    for path in [
        format!("/api/v1/series?match[]={sel}"),
        format!("/api/v1/query?query={sel}"),
        format!("/federate?match[]={sel}"),
        "/api/v1/label/user/values".to_string(),
    ] {
        let (s, _, body) = call(&path, Some(&user)).await;
        assert_eq!(s, StatusCode::OK, "{path}: {body}");
        assert!(body.contains("alice"), "{path}: {body}");
        assert!(
            !body.contains("bob") && !body.contains("n1\"}"),
            "{path}: {body}"
        );
        let (_, _, all) = call(&path, Some(&sched)).await;
        assert!(all.contains("bob"), "{path}: the scheduler sees bob: {all}");
    }
}

#[test]
fn reloading_the_tokens_file_revokes_and_admits_at_once_for_every_clone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("tokens");
    let (a, ea) = mint(Access::Admin).expect("mint");
    let (b, eb) = mint(Access::Scheduler).expect("mint");
    std::fs::write(&file, format!("{}\n", ea.line())).expect("write");
    let auth = Auth::from_file(&file).expect("load");
    let clone = auth.clone();
    let bearer = |t: &str| format!("Bearer {t}");
    assert_eq!(
        clone.check(Some(bearer(&a).as_bytes())).ok(),
        Some(Access::Admin)
    );
    assert!(clone.check(Some(bearer(&b).as_bytes())).is_err());

    // A revoked and B added: every clone sees it at once.
    std::fs::write(&file, format!("{}\n", eb.line())).expect("write");
    assert_eq!(auth.reload_file(&file).expect("reload"), 1);
    assert!(clone.check(Some(bearer(&a).as_bytes())).is_err());
    assert_eq!(
        clone.check(Some(bearer(&b).as_bytes())).ok(),
        Some(Access::Scheduler)
    );

    // A broken file or a missing one: an error, and B still works.
    std::fs::write(&file, "sha256:nothex admin\n").expect("write");
    assert!(matches!(
        auth.reload_file(&file),
        Err(AuthError::TokenFile { line: 1, .. })
    ));
    assert!(auth.reload_file(&dir.path().join("absent")).is_err());
    assert_eq!(
        clone.check(Some(bearer(&b).as_bytes())).ok(),
        Some(Access::Scheduler)
    );

    // An open gateway stays open: a reload is refused, not applied.
    let open = Auth::open();
    assert!(matches!(open.reload_file(&file), Err(AuthError::Open)));
    assert_eq!(open.check(None).ok(), Some(Access::Admin));
}
