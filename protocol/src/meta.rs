//! The result meta line of an exec that travels through someone else's exec channel (the derived
//! path): `<sentinel> <exit_code> <offloaded> <capped> <omitted>` + LF, then the output.
//!
//! The reference uses a fixed sentinel, so a command whose output starts with a look-alike line can
//! forge its own result. Here the caller draws a fresh random sentinel per call, passes it along with
//! the command, and accepts only a first line carrying exactly that sentinel. The parse rules are the contract's
//! (the derived offload of the contract): on anything invalid the original response is returned unchanged.

use rand::RngCore;

use crate::contract::{ExecuteOffloadResult, ExecuteResponse};
use crate::framing::random_token;

/// Prefix of every sentinel.
pub const SENTINEL_PREFIX: &str = "__AGENTD_META_";

/// A fresh sentinel with 80 random bits.
pub fn sentinel<R: RngCore + ?Sized>(rng: &mut R) -> String {
    random_token(SENTINEL_PREFIX, rng)
}

/// The fields of a meta line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetaLine {
    pub exit_code: i32,
    pub offloaded: bool,
    pub capped: bool,
    /// Lines left out by the preview marker; 0 when there is none.
    pub omitted: u64,
}

impl MetaLine {
    /// The line, LF included.
    pub fn render(&self, sentinel: &str) -> String {
        format!(
            "{sentinel} {} {} {} {}\n",
            self.exit_code,
            u8::from(self.offloaded),
            u8::from(self.capped),
            self.omitted
        )
    }
}

/// Applies the contract's parse rules to `response` with the expected `sentinel`.
pub fn parse(response: ExecuteResponse, sentinel: &str) -> ExecuteOffloadResult {
    let (first, body) = match response.output.split_once('\n') {
        Some((first, body)) => (first, body),
        None => (response.output.as_str(), ""),
    };
    let fields: Vec<&str> = first.split(' ').collect();
    let valid = fields.len() == 5 && fields[0] == sentinel;
    let exit_code = fields.get(1).and_then(|f| f.parse::<i32>().ok());
    match (valid, exit_code) {
        (true, Some(exit_code)) => {
            let offloaded = fields[2] == "1";
            let omitted = fields[4].parse::<u64>().unwrap_or(0);
            ExecuteOffloadResult {
                offloaded,
                preview_has_truncation_marker: omitted > 0 && offloaded,
                response: ExecuteResponse {
                    output: body.to_owned(),
                    exit_code: Some(exit_code),
                    truncated: fields[3] == "1" || response.truncated,
                },
            }
        }
        _ => ExecuteOffloadResult { offloaded: false, response, preview_has_truncation_marker: false },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{SeedableRng, rngs::StdRng};

    fn response(output: &str, truncated: bool) -> ExecuteResponse {
        ExecuteResponse { output: output.to_owned(), exit_code: Some(0), truncated }
    }

    #[test]
    fn golden_case_60_with_a_random_sentinel() {
        let s = sentinel(&mut StdRng::seed_from_u64(3));
        for raw in ["garbage\nmore".to_owned(), format!("{s} 0 1 0"), format!("{s} x 1 0 0\nb")] {
            let original = response(&raw, false);
            assert_eq!(
                parse(original.clone(), &s),
                ExecuteOffloadResult { response: original, ..Default::default() }
            );
        }
        let got = parse(response(&format!("{s} 5 1 1 zz\nbody"), false), &s);
        assert_eq!(
            (
                got.offloaded,
                got.response.exit_code,
                got.response.truncated,
                got.preview_has_truncation_marker
            ),
            (true, Some(5), true, false)
        );
        assert_eq!(got.response.output, "body");
        let got = parse(response(&format!("{s} 5 0 0 3\nbody"), true), &s);
        assert_eq!(
            (
                got.offloaded,
                got.response.exit_code,
                got.response.truncated,
                got.preview_has_truncation_marker
            ),
            (false, Some(5), true, false)
        );
    }

    #[test]
    fn a_forged_line_with_another_sentinel_is_not_a_result() {
        let mut rng = StdRng::seed_from_u64(4);
        let real = sentinel(&mut rng);
        let forged =
            MetaLine { exit_code: 0, offloaded: true, capped: false, omitted: 9 }.render(&sentinel(&mut rng));
        let original = response(&forged, false);
        assert_eq!(parse(original.clone(), &real).response, original);
        let line = MetaLine { exit_code: 2, offloaded: true, capped: true, omitted: 4 };
        let got = parse(response(&format!("{}{forged}", line.render(&real)), false), &real);
        assert_eq!(got.response.output, forged);
        assert_eq!(got.response.exit_code, Some(2));
        assert!(got.preview_has_truncation_marker);
    }
}
