//! The file-verb conformance suite: the seven file verbs (the contract's rules and its golden cases
//! 5–53) and the derived offload framing (§4, golden case 55), on every sandbox of the list below,
//! native vs derived, byte for byte. One test per case per sandbox, named `<factory>::<case>`, so a
//! failure names both; a factory whose requirement is missing (the Docker engine, an image) skips its
//! tests visibly ([`agentd_tests::skip`]).
//!
//! Every call runs twice: natively (a real agentd over a real websocket) and on the derived path
//! (`agentd fs request` through nothing but `execute`), on the same files. The two results must be
//! identical, and each must be the contract's value. Mutating calls rebuild their fixture before each
//! run and compare the whole workspace afterwards. Failures are collected per case and reported
//! together at its end, so one run shows every difference (expected vs got, native vs derived) rather
//! than only the first.
//!
//! The tests run as root in CI: cases 34 and 53 assert the root behaviour there (see their comments).
//!
//! Adding a kind of sandbox is one factory function (returning a [`Target`]) in `factories` and one
//! entry in the list below; a case missing from `cases` is dead code, which the lints refuse.
//!
//! ## Layout
//! - [`harness`]: the [`Suite`] a case runs in (each call on both sides, compared; failures collected)
//!   and the [`Target`] a factory makes; file-system helpers and snapshots.
//! - [`expect`]: the contract's values as the cases expect them, and the mutating verbs' requests.
//! - [`factories`]: the sandboxes (local, Docker, Daytona, Modal, Kubernetes), each with its derived
//!   twin.
//! - The cases, one file per verb: [`ls`], [`read`], [`write`], [`edit`], [`delete`], [`grep`],
//!   [`glob`]; [`odd_paths`] (odd names, NUL, symlinks through every verb) and [`offload`] (golden
//!   case 55 and the derived framing).

mod delete;
mod edit;
mod expect;
mod factories;
mod glob;
mod grep;
mod harness;
mod ls;
mod odd_paths;
mod offload;
mod read;
mod write;

use std::future::Future;

use harness::{Suite, Target};

/// One module per factory, one test per case in each: `<factory>::<case>`, the case found as
/// `<verb>::<case>`.
macro_rules! conformance {
    (factories: [$($factory:ident),* $(,)?], cases: $cases:tt $(,)?) => {
        $(conformance!(@factory $factory $cases);)*
    };
    (@factory $factory:ident [$($verb:ident::$case:ident),* $(,)?]) => {
        mod $factory {
            $(
                #[tokio::test]
                async fn $case() {
                    super::run(super::factories::$factory(), super::$verb::$case).await;
                }
            )*
        }
    };
}

conformance! {
    factories: [
        local,
        docker_busybox_baked,
        docker_busybox_injected,
        docker_debian_baked,
        docker_debian_injected,
        daytona_link,
        daytona_toolbox,
        modal_link,
        modal_router,
        kube_pod_baked,
        kube_pod_injected,
        kube_claim,
    ],
    cases: [
        ls::golden_05_06_ls_one_level_links_and_errors,
        read::golden_07_to_10_read_line_endings_and_windows,
        read::golden_11_to_13_read_empty_paging_and_the_utf8_sniff,
        read::golden_14_15_read_invalid_utf8_after_the_sniff,
        read::golden_16_17_read_binary_extensions_and_content,
        read::golden_18_to_20_read_byte_cap_and_total_lines,
        read::golden_21_22_read_odd_bytes_and_non_files,
        read::edge_read_long_lines_crlf_offsets_and_relative_paths,
        read::edge_empty_path_names_nothing,
        write::golden_23_write_creates_overwrites_and_fails_as_values,
        edit::golden_24_to_29_edit_matching_forms_and_counts,
        edit::edge_edit_occurrences_crlf_and_lone_cr,
        edit::golden_30_to_32_edit_errors_links_and_large_payloads,
        delete::golden_33_34_delete_links_and_permissions,
        delete::edge_delete_trees_links_refusals_and_relative_paths,
        grep::golden_35_36_grep_route_a_walk_and_basename_filter,
        grep::golden_37_38_grep_route_b_paths,
        grep::golden_39_to_43_grep_errors_max_count_crlf_and_file_roots,
        grep::edge_grep_glob_hidden_files_git_and_classes,
        grep::edge_long_lines_in_grep,
        glob::golden_44_to_47_glob_basename_and_path_rules,
        glob::golden_48_to_50_glob_braces_classes_and_pattern_checks,
        glob::golden_51_glob_roots,
        glob::golden_52_glob_match_budget,
        glob::golden_53_glob_unreadable_subtrees_as_root,
        odd_paths::edge_odd_file_names_through_every_verb,
        odd_paths::edge_nul_in_a_path,
        odd_paths::edge_symlinks_in_ls_and_delete,
        offload::derived_framing_survives_heredoc_lookalikes_and_forged_meta,
        offload::golden_55_offload_head_tail_preview_on_both_paths,
    ],
}

/// Runs `case` on what `factory` makes (nothing when it skipped).
async fn run<F: Future<Output = ()>>(factory: impl Future<Output = Option<Target>>, case: fn(Suite) -> F) {
    if let Some(target) = factory.await {
        case(Suite::new(target)).await;
    }
}
