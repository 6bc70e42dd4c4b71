//! The built-in dashboard end to end: `canopy up --nodes 8` as a real
//! process, Debian's headless Chromium rendering `/`, and the rendered DOM
//! checked against the jobs the fabric reports through the Prometheus API.
//!
//! Needs Chromium (`.ci/install-chromium.sh`); `CANOPY_CHROMIUM` overrides
//! the binary.

mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{canopy_up, get, results, wait_for};

fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("CANOPY_CHROMIUM") {
        return PathBuf::from(p);
    }
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("chromium"))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "chromium not found: the dashboard end-to-end test needs Debian's headless \
             Chromium; install it with .ci/install-chromium.sh \
             (apt-get install -y --no-install-recommends chromium)"
        )
    })
}

/// Loads `url` in headless Chromium, lets `budget_ms` of virtual time pass
/// (timers run, network fetches are waited for), and returns the DOM.
fn dump_dom(url: &str, budget_ms: u32) -> String {
    let profile = tempfile::tempdir().expect("profile dir");
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--window-size=1400,1000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--virtual-time-budget={budget_ms}"))
        .args(["--dump-dom", url])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts (see .ci/install-chromium.sh)");
    // Read stdout on a thread so a full pipe cannot stall Chromium.
    let mut out = child.stdout.take().expect("stdout piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        s
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait on chromium") {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 90 s on {url}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let dom = reader.join().expect("reader thread");
    assert!(status.success(), "chromium failed on {url}: {status:?}");
    assert!(dom.contains("</html>"), "no DOM from chromium for {url}");
    dom
}

/// The value of `attr="..."` on the element with `id="id"`.
fn attr_of(dom: &str, id: &str, attr: &str) -> Option<String> {
    let at = dom.find(&format!("id=\"{id}\""))?;
    let start = dom[..at].rfind('<')?;
    let end = at + dom[at..].find('>')?;
    let tag = &dom[start..end];
    let from = tag.find(&format!("{attr}=\""))? + attr.len() + 2;
    Some(tag[from..].split('"').next()?.to_string())
}

/// Job ids with an allocation reported right now.
fn live_jobs(port: u16) -> BTreeSet<String> {
    results(port, "count by (job_id) (canopy_job_cpus_allocated)")
        .iter()
        .filter_map(|r| r["metric"]["job_id"].as_str().map(str::to_string))
        .collect()
}

/// Job ids in the rendered job table (`<tr data-job="ID">`).
fn rendered_jobs(dom: &str) -> BTreeSet<String> {
    dom.split("data-job=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn dashboard_renders_live_jobs_and_refreshes() {
    let chrome = chromium();
    assert!(
        Command::new(&chrome)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "{} does not run: reinstall with .ci/install-chromium.sh",
        chrome.display()
    );
    let up = canopy_up(&["--nodes", "8", "--subtrees", "4"]);
    let http = up.http;
    let (status, _) = wait_for("the gateway", Duration::from_secs(60), || {
        get(http, "/").filter(|(s, _)| *s == 200)
    });
    assert_eq!(status, 200);
    // Jobs with a CPU rate (two samples in the window) so the rows are full.
    wait_for("job CPU rates", Duration::from_secs(60), || {
        let r = results(
            http,
            "sum by (job_id) (rate(canopy_job_cpu_seconds_total[1m]))",
        );
        (r.len() >= 3).then_some(())
    });

    let url = format!("http://127.0.0.1:{http}/");
    let before = live_jobs(http);
    let dom = dump_dom(&url, 16_000);
    let after = live_jobs(http);
    let stable: BTreeSet<_> = before.intersection(&after).cloned().collect();
    assert!(stable.len() >= 3, "too few live jobs: {stable:?}");

    // Every job the fabric reported before and after the render is a row.
    let shown = rendered_jobs(&dom);
    let missing: Vec<_> = stable.difference(&shown).collect();
    assert!(
        missing.is_empty(),
        "jobs missing from the page: {missing:?}"
    );
    // Every row carries a traffic light with its word.
    let rows = dom.matches("<tr data-job=").count();
    let lights = ["OK", "Underusing", "Overloading", "No data yet"]
        .iter()
        .map(|w| dom.matches(&format!("class=\"light-word\">{w}<")).count())
        .sum::<usize>();
    assert_eq!(rows, shown.len());
    assert!(lights >= rows, "{lights} lights for {rows} rows");
    assert!(dom.contains("Nodes up"), "overview tiles");
    assert!(
        dom.contains(">9 / 9<"),
        "8 simulated nodes and this host up"
    );

    // The verdicts use the gateway's thresholds (here its defaults).
    assert_eq!(
        attr_of(&dom, "status", "data-limits").as_deref(),
        Some("gateway")
    );
    let served: serde_json::Value = serde_json::from_str(
        &get(http, "/api/v1/status/stress_thresholds")
            .expect("thresholds")
            .1,
    )
    .expect("JSON");
    let cpu_under = attr_of(&dom, "status", "data-cpu-under")
        .and_then(|s| s.parse::<f64>().ok())
        .expect("applied cpu_under");
    assert_eq!(Some(cpu_under), served["data"]["cpu_under"].as_f64());

    // The page refreshed itself: 16 s of page time at a 5 s cadence.
    let n: u32 = attr_of(&dom, "status", "data-refreshes")
        .and_then(|s| s.parse().ok())
        .expect("refresh counter");
    assert!(n >= 3, "only {n} refreshes");
    let first: f64 = attr_of(&dom, "status", "data-updated")
        .and_then(|s| s.parse().ok())
        .expect("data time");

    // A later load shows later data from the gateway's clock.
    std::thread::sleep(Duration::from_millis(1500));
    let dom2 = dump_dom(&url, 6_000);
    let second: f64 = attr_of(&dom2, "status", "data-updated")
        .and_then(|s| s.parse().ok())
        .expect("data time");
    assert!(
        second > first,
        "data time did not advance: {first} -> {second}"
    );
    assert!(dom2.contains("Updated "), "visible update time");

    // The quick filter "asked for more than it used" (cores busy < 50% of
    // allocated): every row shown qualifies, and every job clearly below
    // the line per the API, before and after the render, is shown.
    let idle = |port| -> BTreeSet<String> {
        results(
            port,
            "sum by (job_id) (rate(canopy_job_cpu_seconds_total[1m])) \
             / sum by (job_id) (canopy_job_cpus_allocated) < 0.3",
        )
        .iter()
        .filter_map(|r| r["metric"]["job_id"].as_str().map(str::to_string))
        .collect()
    };
    let idle_before = idle(http);
    let page = dump_dom(&format!("{url}#/?filter=waste"), 6_000);
    let idle_after = idle(http);
    assert!(
        page.contains("(asked for more than it used)"),
        "filter caption"
    );
    let rows: Vec<(String, f64)> = page
        .split("<tr data-job=\"")
        .skip(1)
        .map(|row| {
            let id = row.split('"').next().unwrap_or_default().to_string();
            // First numeric cell: "used / allocated (percent)"; the page
            // rounds the percent, so a job under 50% shows at most "50%".
            let pct: f64 = row
                .split("class=\"n\">")
                .nth(1)
                .and_then(|c| c.split('<').next())
                .and_then(|c| c.rsplit_once('(')?.1.split('%').next()?.parse().ok())
                .unwrap_or(f64::NAN);
            (id, pct)
        })
        .collect();
    for (id, pct) in &rows {
        assert!(
            *pct <= 50.0,
            "job {id} at {pct}% of its cores passed the filter"
        );
    }
    let shown: BTreeSet<_> = rows.iter().map(|(id, _)| id.clone()).collect();
    for id in idle_before.intersection(&idle_after) {
        assert!(shown.contains(id), "idle job {id} missing under the filter");
    }

    // A job page: its heading, its verdict in words, and charts with data.
    // Simulated jobs end: a job that ended between the listing and its
    // page is shown as not running, which is right only if it did end;
    // then the next one is taken.
    let mut pages = stable.iter().map(|job| {
        let page = dump_dom(&format!("{url}#/job/{job}"), 6_000);
        (job, page)
    });
    let (job, page) = pages
        .find(|(job, page)| {
            let ended = page.contains(&format!("Job {job} is not running now"));
            assert!(
                !ended || !live_jobs(http).contains(*job),
                "job {job} shown as not running while it runs"
            );
            !ended
        })
        .expect("a job that kept running while its page loaded");
    assert!(page.contains(&format!(">Job {job}<")), "job heading");
    let verdict: Option<String> = page
        .find("class=\"verdict\"")
        .map(|i| page[i..].chars().take(600).collect());
    assert!(
        ["OK", "Underusing", "Overloading"]
            .iter()
            .any(|w| page.contains(&format!("class=\"light-word\">{w}<"))),
        "job {job} verdict, got {verdict:?}"
    );
    assert!(
        page.contains("Latest: used "),
        "CPU chart caption with data"
    );
    // A node page lists its jobs. The job may end meanwhile (the
    // simulated jobs churn): its node is read from its last samples.
    let node = results(
        http,
        &format!(
            "count by (node) (last_over_time(canopy_job_cpus_allocated{{job_id=\"{job}\"}}[10m]))"
        ),
    )
    .first()
    .and_then(|r| r["metric"]["node"].as_str().map(str::to_string))
    .expect("the job's node");
    let page = dump_dom(&format!("{url}#/node/{node}"), 6_000);
    assert!(page.contains(&format!(">Node {node}<")), "node heading");
    assert!(
        page.contains(&format!("data-job=\"{job}\"")) || !live_jobs(http).contains(job),
        "job {job} listed on node {node}"
    );
}

/// `data.result` of an instant query sent with `Authorization: Bearer`.
fn results_as(port: u16, q: &str, token: &str) -> Vec<serde_json::Value> {
    let auth = format!("Bearer {token}");
    support::request(
        port,
        "GET",
        &format!("/api/v1/query?query={}", support::urlencode(q)),
        &[("Authorization", auth.as_str())],
        b"",
    )
    .filter(|(s, _)| *s == 200)
    .and_then(|(_, b)| serde_json::from_str::<serde_json::Value>(&b).ok())
    .and_then(|v| v["data"]["result"].as_array().cloned())
    .unwrap_or_default()
}

/// Job ids by user, as an admin sees them now.
fn jobs_by_user(port: u16, admin: &str) -> Vec<(String, String)> {
    results_as(
        port,
        "count by (user, job_id) (canopy_job_cpus_allocated)",
        admin,
    )
    .iter()
    .filter_map(|r| {
        let m = &r["metric"];
        Some((
            m["user"].as_str()?.to_string(),
            m["job_id"].as_str()?.to_string(),
        ))
    })
    .collect()
}

#[test]
fn dashboard_with_a_user_token_shows_only_that_users_jobs() {
    let chrome = chromium();
    assert!(
        Command::new(&chrome)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "{} does not run: reinstall with .ci/install-chromium.sh",
        chrome.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("tokens");
    let f = file.to_str().expect("UTF-8");
    let mint = |args: &[&str]| -> String {
        let mut all = vec!["token", "--append", f];
        all.extend_from_slice(args);
        support::canopy(&all)
            .lines()
            .find_map(|l| l.strip_prefix("secret: ").map(str::to_string))
            .expect("a secret")
    };
    let admin = mint(&["--role", "admin"]);
    let users = [
        "alice", "bob", "chen", "dana", "emil", "fatima", "goran", "hiro", "ines", "jamal",
    ];
    let tokens: Vec<(&str, String)> = users
        .iter()
        .map(|u| (*u, mint(&["--role", "user", "--user", u])))
        .collect();
    let up = canopy_up(&["--nodes", "8", "--subtrees", "4", "--tokens", f]);
    let http = up.http;
    let me = wait_for("jobs of two users", Duration::from_secs(90), || {
        let by = jobs_by_user(http, &admin);
        let users: BTreeSet<&str> = by.iter().map(|(u, _)| u.as_str()).collect();
        (users.len() >= 2).then(|| by[0].0.clone())
    });
    let tok = &tokens.iter().find(|(u, _)| *u == me).expect("a token").1;
    let url = format!("http://127.0.0.1:{http}/");

    // Without a token the page asks for one and shows no job.
    let dom = dump_dom(&url, 4_000);
    assert!(dom.contains("asks for an access token"), "token prompt");
    assert!(rendered_jobs(&dom).is_empty());

    // With `#token=`, it shows the user's jobs and nobody else's.
    let before = jobs_by_user(http, &admin);
    let dom = dump_dom(&format!("{url}#token={tok}"), 8_000);
    let after = jobs_by_user(http, &admin);
    let others: BTreeSet<String> = before
        .iter()
        .chain(&after)
        .filter(|(u, _)| *u != me)
        .map(|(_, j)| j.clone())
        .collect();
    let shown = rendered_jobs(&dom);
    assert!(!shown.is_empty(), "my jobs are shown");
    let leaked: Vec<_> = shown.intersection(&others).collect();
    assert!(
        leaked.is_empty(),
        "other users' jobs on the page: {leaked:?}"
    );
    assert!(
        !dom.contains(tok.as_str()),
        "the token left the address bar and the page"
    );
    // Shares are of the user's own jobs, and the page says so.
    assert!(
        dom.contains(&format!("Share of {me}'s job I/O")) && !dom.contains("Share of cluster I/O"),
        "the I/O share column names whose I/O it divides"
    );
}
