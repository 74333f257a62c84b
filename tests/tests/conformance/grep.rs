//! `grep`: golden cases 35–43 (route A's walk and basename filter, route B's paths, errors,
//! `max_count`, CRLF, file roots) and the edges (hidden files, `.git`, classes, long lines), on the
//! grep tree `G` of §5.

use std::path::Path;

use agentd_protocol::fs::GrepMatch;

use crate::expect::{found, gm, grep_error, hits};
use crate::harness::{Suite, write_file};

/// The grep tree `G` of §5.
fn build_g(g: &Path) {
    for (rel, content) in [
        ("a.py", "needle one\nno\nneedle two\n"),
        ("sub/b.py", "xx needle\n"),
        ("sub/c.txt", "needle txt\n"),
        (".hidden.py", "needle hidden\n"),
        (".hdir/d.py", "needle in hidden dir\n"),
        (".git/config", "needle in git\n"),
        ("sub/.git/x", "needle in nested git\n"),
        ("we:ird.py", "needle colon\n"),
        ("crlf.py", "needle crlf\r\nother\r\n"),
        ("cr.py", "first\rneedle cr\rlast"),
        ("src/app/main.py", "needle main\n"),
        ("src/top.py", "needle top\n"),
    ] {
        write_file(g.join(rel), content);
    }
}
/// Golden case 35's eleven matches under the root text `g`.
fn g35(g: &str) -> Vec<GrepMatch> {
    let mut all = vec![
        gm(format!("{g}/.hdir/d.py"), 1, "needle in hidden dir"),
        gm(format!("{g}/.hidden.py"), 1, "needle hidden"),
        gm(format!("{g}/a.py"), 1, "needle one"),
        gm(format!("{g}/a.py"), 3, "needle two"),
        gm(format!("{g}/cr.py"), 1, "first\rneedle cr\rlast"),
        gm(format!("{g}/crlf.py"), 1, "needle crlf\r"),
        gm(format!("{g}/src/app/main.py"), 1, "needle main"),
        gm(format!("{g}/src/top.py"), 1, "needle top"),
        gm(format!("{g}/sub/b.py"), 1, "xx needle"),
        gm(format!("{g}/sub/c.txt"), 1, "needle txt"),
        gm(format!("{g}/we:ird.py"), 1, "needle colon"),
    ];
    all.sort();
    all
}

pub async fn golden_35_36_grep_route_a_walk_and_basename_filter(s: Suite) {
    let (dir, g) = s.fixture("g");
    build_g(&dir);
    let all = g35(&g);

    // 35: everything except `.git`, at any depth.
    s.check("35 grep(needle, G)", &s.grep_a("needle", Some(&g), None, None).await, &hits(all.clone(), false));
    // 36: the basename filter; `*` matches a leading dot.
    let py: Vec<GrepMatch> = all.iter().filter(|m| !m.path.ends_with("sub/c.txt")).cloned().collect();
    s.check(
        "36 grep(needle, G, *.py)",
        &s.grep_a("needle", Some(&g), Some("*.py"), None).await,
        &hits(py, false),
    );

    // No root: `.`, paths start with `./`.
    let dot: Vec<GrepMatch> = g35("./g");
    s.check("grep(needle) with no root", &s.grep_a("needle", None, None, None).await, &hits(dot, false));
    // A relative root is echoed.
    s.check("grep(needle, g)", &s.grep_a("needle", Some("g"), None, None).await, &hits(g35("g"), false));
    // A root ending in `/` gives no doubled slash.
    s.check(
        "grep(needle, G/)",
        &s.grep_a("needle", Some(&format!("{g}/")), None, None).await,
        &hits(all.clone(), false),
    );
    // Literal, case-sensitive, never a regex.
    s.check("grep(NEEDLE)", &s.grep_a("NEEDLE", Some(&g), None, None).await, &hits(vec![], false));
    s.check("grep(n.edle) is literal", &s.grep_a("n.edle", Some(&g), None, None).await, &hits(vec![], false));
    s.finish();
}

pub async fn golden_37_38_grep_route_b_paths(s: Suite) {
    let (dir, g) = s.fixture("g");
    build_g(&dir);
    let at = |rel: &str, line, text: &str| gm(format!("{g}/{rel}"), line, text);

    // 37: exact order, universal newlines, no dot-names.
    let want = vec![
        at("a.py", 1, "needle one"),
        at("a.py", 3, "needle two"),
        at("cr.py", 2, "needle cr"),
        at("crlf.py", 1, "needle crlf"),
        at("src/app/main.py", 1, "needle main"),
        at("src/top.py", 1, "needle top"),
        at("sub/b.py", 1, "xx needle"),
        at("we:ird.py", 1, "needle colon"),
    ];
    s.check(
        "37 grep(needle, G, **/*.py)",
        &s.grep_b("needle", Some(&g), Some("**/*.py"), None).await,
        &hits(want, false),
    );

    // 38.
    let want = vec![
        at("a.py", 1, "needle one"),
        at("a.py", 3, "needle two"),
        at("cr.py", 2, "needle cr"),
        at("crlf.py", 1, "needle crlf"),
        at("we:ird.py", 1, "needle colon"),
    ];
    s.check(
        "38 grep(…, /*.py)",
        &s.grep_b("needle", Some(&g), Some("/*.py"), None).await,
        &hits(want, false),
    );
    let want = vec![at("src/app/main.py", 1, "needle main"), at("src/top.py", 1, "needle top")];
    s.check(
        "38 grep(…, src/**/*.py)",
        &s.grep_b("needle", Some(&g), Some("src/**/*.py"), None).await,
        &hits(want, false),
    );
    s.check(
        "38 grep(needle, G/.git)",
        &s.grep_a("needle", Some(&format!("{g}/.git")), None, None).await,
        &hits(vec![at(".git/config", 1, "needle in git")], false),
    );
    s.check(
        "38 grep(…, *.{py,txt})",
        &s.grep_a("needle", Some(&g), Some("*.{py,txt}"), None).await,
        &hits(vec![], false),
    );
    s.finish();
}

pub async fn golden_39_to_43_grep_errors_max_count_crlf_and_file_roots(s: Suite) {
    let (dir, g) = s.fixture("g");
    build_g(&dir);
    let at = |rel: &str, line, text: &str| gm(format!("{g}/{rel}"), line, text);
    let all = g35(&g);

    // 39.
    s.check(
        "39 grep(…, ../*.py)",
        &s.grep_b("needle", Some(&g), Some("../*.py"), None).await,
        &grep_error(format!("Path '{g}': exit code 2")),
    );
    s.check(
        "39 grep(…, sub/../*.py)",
        &s.grep_b("needle", Some(&g), Some("sub/../*.py"), None).await,
        &grep_error(format!("Path '{g}': exit code 2")),
    );
    s.check(
        "39 grep(x, G/missing)",
        &s.grep_a("x", Some(&format!("{g}/missing")), None, None).await,
        &hits(vec![], false),
    );

    // 40: max_count.
    let two = s.grep_a("needle", Some(&g), None, Some(2)).await;
    s.ensure(
        "40 max_count 2: two of the #35 matches, truncated, no error",
        two.error.is_none()
            && two.truncated
            && two.matches.as_ref().is_some_and(|m| m.len() == 2 && m.iter().all(|x| all.contains(x))),
        &two,
    );
    s.check(
        "40 max_count 11",
        &s.grep_a("needle", Some(&g), None, Some(11)).await,
        &hits(all.clone(), false),
    );
    s.check("40 max_count 0", &s.grep_a("needle", Some(&g), None, Some(0)).await, &hits(vec![], true));
    s.check("max_count 12", &s.grep_a("needle", Some(&g), None, Some(12)).await, &hits(all.clone(), false));
    // Route B keeps the first n in its (specified) order.
    s.check(
        "max_count 3, route B",
        &s.grep_b("needle", Some(&g), Some("**/*.py"), Some(3)).await,
        &hits(
            vec![at("a.py", 1, "needle one"), at("a.py", 3, "needle two"), at("cr.py", 2, "needle cr")],
            true,
        ),
    );
    s.check(
        "max_count 0 without a match",
        &s.grep_a("zzz", Some(&g), None, Some(0)).await,
        &hits(vec![], false),
    );

    // 41: CR stays on route A, not on route B.
    s.check(
        "41 grep(other, G/crlf.py)",
        &s.grep_b("other", Some(&format!("{g}/crlf.py")), None, None).await,
        &hits(vec![at("crlf.py", 2, "other\r")], false),
    );
    s.check(
        "41 grep(other, G, /crlf.py)",
        &s.grep_b("other", Some(&g), Some("/crlf.py"), None).await,
        &hits(vec![at("crlf.py", 2, "other")], false),
    );

    // 42: a file root is filtered on route A; route B ignores the glob.
    let a_py = format!("{g}/a.py");
    s.check(
        "42 grep(needle, G/a.py, *.txt)",
        &s.grep_b("needle", Some(&a_py), Some("*.txt"), None).await,
        &hits(vec![], false),
    );
    s.check(
        "42 grep(needle, G/a.py, zzz/*.txt)",
        &s.grep_b("needle", Some(&a_py), Some("zzz/*.txt"), None).await,
        &hits(vec![at("a.py", 1, "needle one"), at("a.py", 3, "needle two")], false),
    );
    s.check(
        "file root matching its filter",
        &s.grep_b("needle", Some(&a_py), Some("*.py"), None).await,
        &hits(vec![at("a.py", 1, "needle one"), at("a.py", 3, "needle two")], false),
    );

    // 43: a pattern with LF.
    let (d43, d) = s.fixture("g43");
    write_file(d43.join("f.txt"), b"abc\nxyz\nb\n");
    let f = |line, text: &str| gm(format!("{d}/f.txt"), line, text);
    s.check(
        "43 grep(b\\n, dir)",
        &s.grep_a("b\n", Some(&d), None, None).await,
        &hits(vec![f(1, "abc"), f(2, "xyz"), f(3, "b")], false),
    );
    s.check(
        "43 grep(b\\n, dir, /*.txt)",
        &s.grep_b("b\n", Some(&d), Some("/*.txt"), None).await,
        &hits(vec![f(3, "b")], false),
    );
    s.check(
        "empty pattern matches every line",
        &s.grep_a("", Some(&d), None, None).await,
        &hits(vec![f(1, "abc"), f(2, "xyz"), f(3, "b")], false),
    );
    s.finish();
}

pub async fn edge_grep_glob_hidden_files_git_and_classes(s: Suite) {
    let (dir, g) = s.fixture("g");
    build_g(&dir);
    let at = |rel: &str, line, text: &str| gm(format!("{g}/{rel}"), line, text);
    let all = g35(&g);

    // Route A: `*` includes dot-files; `.*` only them; classes on the basename.
    s.check("grep glob *", &s.grep_a("needle", Some(&g), Some("*"), None).await, &hits(all.clone(), false));
    s.check(
        "grep glob .*",
        &s.grep_a("needle", Some(&g), Some(".*"), None).await,
        &hits(vec![at(".hidden.py", 1, "needle hidden")], false),
    );
    let mut classes = vec![
        at("a.py", 1, "needle one"),
        at("a.py", 3, "needle two"),
        at("cr.py", 1, "first\rneedle cr\rlast"),
        at("crlf.py", 1, "needle crlf\r"),
        at("sub/b.py", 1, "xx needle"),
    ];
    classes.sort();
    s.check(
        "grep glob [a-c]*.py",
        &s.grep_a("needle", Some(&g), Some("[a-c]*.py"), None).await,
        &hits(classes, false),
    );
    s.check(
        "grep glob [!a-z]*",
        &s.grep_a("needle", Some(&g), Some("[!a-z]*"), None).await,
        &hits(vec![at(".hidden.py", 1, "needle hidden")], false),
    );
    s.check(
        "grep glob ?.py",
        &s.grep_a("needle", Some(&g), Some("?.py"), None).await,
        &hits(
            vec![
                at(".hdir/d.py", 1, "needle in hidden dir"),
                at("a.py", 1, "needle one"),
                at("a.py", 3, "needle two"),
                at("sub/b.py", 1, "xx needle"),
            ],
            false,
        ),
    );
    // A dot-dir root is searched; a nested `.git` under it is still excluded.
    s.check(
        "grep root G/.hdir",
        &s.grep_a("needle", Some(&format!("{g}/.hdir")), None, None).await,
        &hits(vec![at(".hdir/d.py", 1, "needle in hidden dir")], false),
    );
    s.check(
        "grep root G/sub: sub/.git excluded",
        &s.grep_a("needle", Some(&format!("{g}/sub")), None, None).await,
        &hits(vec![at("sub/b.py", 1, "xx needle"), at("sub/c.txt", 1, "needle txt")], false),
    );
    // Route B: hits under an excluded name are skipped; dot-names need a dot segment.
    s.check(
        "grep glob .git/*",
        &s.grep_b("needle", Some(&g), Some(".git/*"), None).await,
        &hits(vec![], false),
    );
    s.check(
        "grep glob .hdir/*.py",
        &s.grep_b("needle", Some(&g), Some(".hdir/*.py"), None).await,
        &hits(vec![at(".hdir/d.py", 1, "needle in hidden dir")], false),
    );
    s.check(
        "grep glob /.*.py",
        &s.grep_b("needle", Some(&g), Some("/.*.py"), None).await,
        &hits(vec![at(".hidden.py", 1, "needle hidden")], false),
    );

    // Glob: dot-dirs are walked (no exclude list), `**` never crosses a dot-component.
    s.check("glob config", &s.glob("config", Some(&g)).await, &found(&g, ".git/config"));
    s.check("glob .git/*", &s.glob(".git/*", Some(&g)).await, &found(&g, ".git/config"));
    s.check("glob **/config", &s.glob("**/config", Some(&g)).await, &found(&g, ""));
    s.check("glob x", &s.glob("x", Some(&g)).await, &found(&g, "sub/.git/x"));
    s.check("glob sub/**", &s.glob("sub/**", Some(&g)).await, &found(&g, "sub/b.py sub/c.txt"));
    s.check("glob **/.git/*", &s.glob("**/.git/*", Some(&g)).await, &found(&g, ".git/config sub/.git/x"));
    s.finish();
}

pub async fn edge_long_lines_in_grep(s: Suite) {
    let (dir, d) = s.fixture("long");
    let (a, b) = ("a".repeat(6000), format!("{}needle{}", "b".repeat(5000), "c".repeat(3000)));
    write_file(dir.join("l.txt"), format!("{a}\n{b}\n"));
    let want = hits(vec![gm(format!("{d}/l.txt"), 2, &b)], false);
    s.check("long line, route A", &s.grep_a("needle", Some(&d), None, None).await, &want);
    s.check("long line, route B", &s.grep_b("needle", Some(&d), Some("/l.txt"), None).await, &want);
    s.check(
        "long line, file root",
        &s.grep_b("needle", Some(&format!("{d}/l.txt")), None, None).await,
        &want,
    );
    s.finish();
}
