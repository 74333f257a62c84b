//! Brace expansion of glob patterns (contract §3.7). Pure, and in a file of its own so the fuzzer
//! (`fuzz/fuzz_targets/braces.rs`) includes it as is.

/// Expands braces (§3.7): leftmost group first, top-level commas split it, a group without a matching
/// `}` leaves the whole rest literal, a group of fewer than two parts stays literal. `None` when the
/// expansions exceed `limit`.
///
/// The stack stays bounded whatever the pattern: one-part groups are passed over in a loop, and
/// nesting deeper than `limit` is refused. (A pattern of 20,000 `{a}` groups, or of 10,000 `{a,b}`
/// groups, once recursed once per group and overflowed the stack: a stack overflow aborts agentd.)
/// Refusing depth does not refuse anything that fits: every level of the recursion is a group of at
/// least two parts, each expanding to at least one string, so a pattern that recurses `limit` deep
/// has more than `limit` expansions anyway.
pub fn expand_braces(pattern: &str, limit: usize) -> Option<Vec<String>> {
    let mut out = Vec::new();
    expand_into(String::new(), pattern, &mut out, limit, 0)?;
    Some(out)
}

/// Appends `prefix` + each expansion of `rest` to `out`; `depth` is the number of enclosing calls.
fn expand_into(
    mut prefix: String,
    mut rest: &str,
    out: &mut Vec<String>,
    limit: usize,
    depth: usize,
) -> Option<()> {
    if depth > limit {
        return None;
    }
    let literal = |out: &mut Vec<String>, mut prefix: String, rest: &str| {
        prefix.push_str(rest);
        out.push(prefix);
        (out.len() <= limit).then_some(())
    };
    loop {
        let Some(open) = rest.find('{') else { return literal(out, prefix, rest) };
        let mut level = 0usize;
        let mut close = None;
        let mut commas = Vec::new();
        // Braces and commas are ASCII, so byte offsets are char boundaries.
        for (i, b) in rest.bytes().enumerate().skip(open) {
            match b {
                b'{' => level += 1,
                b'}' => {
                    level -= 1;
                    if level == 0 {
                        close = Some(i);
                        break;
                    }
                }
                b',' if level == 1 => commas.push(i),
                _ => {}
            }
        }
        let Some(close) = close else { return literal(out, prefix, rest) };
        if commas.is_empty() {
            // A one-part group stays literal; go on after it.
            prefix.push_str(&rest[..=close]);
            rest = &rest[close + 1..];
            continue;
        }
        let head = prefix + &rest[..open];
        let suffix = &rest[close + 1..];
        let mut start = open + 1;
        for end in commas.into_iter().chain([close]) {
            expand_into(head.clone(), &format!("{}{suffix}", &rest[start..end]), out, limit, depth + 1)?;
            start = end + 1;
        }
        return Some(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_groups_neither_overflow_the_stack_nor_lose_meaning() {
        // On the stack of a tokio thread (2 MiB), where agentd runs verbs.
        let run = std::thread::Builder::new().stack_size(2 << 20).spawn(|| {
            let one_part = "{a}".repeat(100_000);
            assert_eq!(expand_braces(&one_part, 1000), Some(vec![one_part.clone()]));
            assert_eq!(expand_braces(&"{a,b}".repeat(10_000), 1000), None);
            assert_eq!(expand_braces(&format!("{}{}", "{a,".repeat(10_000), "}".repeat(10_000)), 1000), None);
            // Depth up to the limit still expands.
            let nested = format!("{}x{}", "{a,".repeat(999), "}".repeat(999));
            assert_eq!(expand_braces(&nested, 1000).map(|v| v.len()), Some(1000));
            assert_eq!(expand_braces(&"{a,b}".repeat(9), 1000).map(|v| v.len()), Some(512));
        });
        assert!(run.and_then(|handle| handle.join().map_err(|_| std::io::Error::other("panicked"))).is_ok());
    }
}
