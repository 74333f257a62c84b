//! Which variables of the harness's environment reach the commands of a sandbox the host starts
//! (the embedded default: `LocalSandbox`, `agentctl up`). The harness's environment holds its own
//! secrets (model API keys, cloud and provider credentials), and the sandbox's network is open:
//! commands get a minimal environment, plus the names the caller gives.
//!
//! A caller's name is exact (`NPM_CONFIG_REGISTRY`) or a prefix pattern ending in `*`
//! (`NPM_CONFIG_*`). A name that looks like a secret ([`looks_secret`]) passes only when named
//! exactly: a pattern, or the minimal set, never lets it through.

/// What every command needs to behave as in a terminal: where programs are, whose home, the
/// locale, the terminal, the time zone, where temporary files go.
pub const MINIMAL: &[&str] =
    &["PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "COLORTERM", "TZ", "TMPDIR"];

/// Prefixes of the minimal set: the locale's categories.
pub const MINIMAL_PREFIXES: &[&str] = &["LC_"];

/// Words that mark a name as a secret, wherever they stand in it (case ignored).
pub const SECRET_WORDS: &[&str] = &["KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL"];

/// Whether `name` looks like it holds a secret (`ANTHROPIC_API_KEY`, `GITHUB_TOKEN`,
/// `AWS_SECRET_ACCESS_KEY`, `GOOGLE_APPLICATION_CREDENTIALS`, `PGPASSWORD`).
pub fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_WORDS.iter().any(|word| upper.contains(word))
}

/// Whether the variable `name` passes, given the caller's `named` names and patterns.
pub fn passes(name: &str, named: &[String]) -> bool {
    if named.iter().any(|n| n == name) {
        return true;
    }
    if looks_secret(name) {
        return false;
    }
    let prefix = |p: &str| name.starts_with(p);
    MINIMAL.contains(&name)
        || MINIMAL_PREFIXES.iter().copied().any(prefix)
        || named.iter().filter_map(|n| n.strip_suffix('*')).any(prefix)
}

/// The variables of `vars` that pass (names that are not UTF-8 never do).
pub fn passing<K, V>(vars: impl IntoIterator<Item = (K, V)>, named: &[String]) -> Vec<(K, V)>
where
    K: AsRef<std::ffi::OsStr>,
{
    vars.into_iter().filter(|(key, _)| key.as_ref().to_str().is_some_and(|key| passes(key, named))).collect()
}

/// Why a caller's entry is not a name or a pattern: empty, `=` in it, or `*` other than at its end.
pub fn check_named(entry: &str) -> Result<(), String> {
    let stem = entry.strip_suffix('*').unwrap_or(entry);
    if stem.is_empty() || stem.contains(['=', '*', '\0']) {
        return Err(format!(
            "`{entry}`: expected a variable's name, or a prefix ending in `*` (e.g. NPM_CONFIG_*)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn secrets_stay_with_the_harness() {
        for name in [
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
            "DAYTONA_API_KEY",
            "MODAL_TOKEN_SECRET",
            "MODAL_TOKEN_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_ACCESS_KEY_ID",
            "GITHUB_TOKEN",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "PGPASSWORD",
            "AGENTD_TOKEN",
            "ssh_auth_key",
        ] {
            assert!(looks_secret(name), "{name}");
            assert!(!passes(name, &[]), "{name}");
            assert!(!passes(name, &names(&["*", "AWS_*", "ANTHROPIC*", "GITHUB_*"])), "{name}");
        }
    }

    #[test]
    fn the_minimal_set_passes_and_nothing_else_unnamed() {
        for name in ["PATH", "HOME", "LANG", "TERM", "TZ", "LC_ALL", "LC_CTYPE", "TMPDIR", "USER"] {
            assert!(passes(name, &[]), "{name}");
        }
        for name in ["EDITOR", "PYTHONPATH", "DATABASE_URL", "http_proxy", "LD_PRELOAD", "PATHS", "XHOME"] {
            assert!(!passes(name, &[]), "{name}");
        }
    }

    #[test]
    fn what_the_caller_names_passes_and_a_secret_only_by_its_exact_name() {
        let named = names(&["DATABASE_URL", "NPM_CONFIG_*", "GITHUB_TOKEN"]);
        assert!(passes("DATABASE_URL", &named));
        assert!(passes("NPM_CONFIG_REGISTRY", &named));
        assert!(passes("GITHUB_TOKEN", &named));
        assert!(!passes("NPM_CONFIG__AUTH_TOKEN", &named));
        assert!(!passes("DATABASE_URL2", &named));
        assert!(!passes("GITHUB_TOKEN_2", &named));
    }

    #[test]
    fn only_passing_variables_are_kept_in_order() {
        let vars = [("HOME", "/h"), ("OPENAI_API_KEY", "sk"), ("LANG", "C"), ("X", "1")];
        assert_eq!(passing(vars, &names(&["X"])), [("HOME", "/h"), ("LANG", "C"), ("X", "1")]);
        use std::os::unix::ffi::OsStrExt as _;
        let odd = std::ffi::OsStr::from_bytes(b"PATH\xff");
        assert!(passing([(odd, "v")], &names(&["*"])).is_empty());
    }

    #[test]
    fn entries_are_names_or_prefixes() {
        for good in ["X", "NPM_CONFIG_*", "lower"] {
            assert_eq!(check_named(good), Ok(()), "{good}");
        }
        for bad in ["", "*", "A=B", "A*B", "**", "A**"] {
            assert!(check_named(bad).is_err(), "{bad}");
        }
    }
}
