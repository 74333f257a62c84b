//! Label and field selectors as the list and watch verbs take them (`labelSelector=a=b,c!=d,e in
//! (x,y),!f`, `fieldSelector=metadata.name=x`).

use serde_json::Value;

use super::status::ApiError;

#[derive(Clone, Debug, PartialEq)]
enum Op {
    Exists,
    DoesNotExist,
    Equals(String),
    NotEquals(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    GreaterThan(i64),
    LessThan(i64),
}

/// One requirement on a label (or a field, by its dotted path).
#[derive(Clone, Debug, PartialEq)]
struct Requirement {
    key: String,
    op: Op,
}

/// A label selector and a field selector together; the empty one matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selector {
    labels: Vec<Requirement>,
    fields: Vec<Requirement>,
}

impl Selector {
    /// Parses the `labelSelector` and `fieldSelector` query values; `BadRequest` for a bad one.
    pub fn parse(labels: Option<&str>, fields: Option<&str>) -> Result<Self, ApiError> {
        Ok(Self {
            labels: labels.map(parse_labels).transpose()?.unwrap_or_default(),
            fields: fields.map(parse_fields).transpose()?.unwrap_or_default(),
        })
    }

    /// Selects objects whose labels hold `key=value` for each pair.
    pub fn labels_equal(pairs: &[(&str, &str)]) -> Self {
        Self {
            labels: pairs
                .iter()
                .map(|(k, v)| Requirement { key: (*k).to_owned(), op: Op::Equals((*v).to_owned()) })
                .collect(),
            fields: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    pub fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels");
        let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        let field = |path: &str| -> Option<String> {
            let pointer = format!("/{}", path.replace('.', "/"));
            match object.pointer(&pointer)? {
                Value::String(s) => Some(s.clone()),
                Value::Null => None,
                other => Some(other.to_string()),
            }
        };
        self.labels.iter().all(|r| r.holds(label(&r.key)))
            && self.fields.iter().all(|r| r.holds(field(&r.key).as_deref().or(Some(""))))
    }
}

impl Requirement {
    fn holds(&self, value: Option<&str>) -> bool {
        match &self.op {
            Op::Exists => value.is_some(),
            Op::DoesNotExist => value.is_none(),
            Op::Equals(want) => value == Some(want.as_str()),
            Op::NotEquals(want) => value != Some(want.as_str()),
            Op::In(set) => value.is_some_and(|v| set.iter().any(|s| s == v)),
            Op::NotIn(set) => value.is_none_or(|v| !set.iter().any(|s| s == v)),
            Op::GreaterThan(n) => value.and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v > *n),
            Op::LessThan(n) => value.and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v < *n),
        }
    }
}

fn bad(selector: &str, why: &str) -> ApiError {
    ApiError::bad_request(format!("unable to parse requirement: {why} (in selector {selector:?})"))
}

/// Splits on the commas outside parentheses.
fn split_top(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 317
        && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(value: &str) -> bool {
    value.len() <= 63 && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn parse_labels(selector: &str) -> Result<Vec<Requirement>, ApiError> {
    let mut requirements = Vec::new();
    for part in split_top(selector) {
        let part = part.trim();
        if part.is_empty() {
            if selector.trim().is_empty() {
                continue;
            }
            return Err(bad(selector, "empty requirement"));
        }
        let requirement = if let Some(key) = part.strip_prefix('!') {
            Requirement { key: key.trim().to_owned(), op: Op::DoesNotExist }
        } else if let Some((key, value)) = part.split_once("!=") {
            Requirement { key: key.trim().to_owned(), op: Op::NotEquals(value.trim().to_owned()) }
        } else if let Some((key, value)) = part.split_once("==") {
            Requirement { key: key.trim().to_owned(), op: Op::Equals(value.trim().to_owned()) }
        } else if let Some((key, value)) = part.split_once('=') {
            Requirement { key: key.trim().to_owned(), op: Op::Equals(value.trim().to_owned()) }
        } else if let Some((key, value)) = part.split_once('>') {
            let n = value.trim().parse().map_err(|_| bad(selector, "a number must follow '>'"))?;
            Requirement { key: key.trim().to_owned(), op: Op::GreaterThan(n) }
        } else if let Some((key, value)) = part.split_once('<') {
            let n = value.trim().parse().map_err(|_| bad(selector, "a number must follow '<'"))?;
            Requirement { key: key.trim().to_owned(), op: Op::LessThan(n) }
        } else if let Some(open) = part.find('(') {
            let head: Vec<&str> = part[..open].split_whitespace().collect();
            let Some(inner) = part[open + 1..].trim_end().strip_suffix(')') else {
                return Err(bad(selector, "found '(', expected ')'"));
            };
            let set: Vec<String> = inner.split(',').map(|v| v.trim().to_owned()).collect();
            if set.iter().any(|v| !valid_value(v)) {
                return Err(bad(selector, "invalid value in set"));
            }
            match head.as_slice() {
                [key, "in"] => Requirement { key: (*key).to_owned(), op: Op::In(set) },
                [key, "notin"] => Requirement { key: (*key).to_owned(), op: Op::NotIn(set) },
                _ => return Err(bad(selector, "expected 'in' or 'notin' before '('")),
            }
        } else {
            Requirement { key: part.to_owned(), op: Op::Exists }
        };
        if !valid_key(&requirement.key) {
            return Err(bad(selector, &format!("invalid label key {:?}", requirement.key)));
        }
        if let Op::Equals(v) | Op::NotEquals(v) = &requirement.op
            && !valid_value(v)
        {
            return Err(bad(selector, &format!("invalid label value {v:?}")));
        }
        requirements.push(requirement);
    }
    Ok(requirements)
}

fn parse_fields(selector: &str) -> Result<Vec<Requirement>, ApiError> {
    let mut requirements = Vec::new();
    for part in selector.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let requirement = if let Some((key, value)) = part.split_once("!=") {
            Requirement { key: key.trim().to_owned(), op: Op::NotEquals(value.trim().to_owned()) }
        } else if let Some((key, value)) = part.split_once("==") {
            Requirement { key: key.trim().to_owned(), op: Op::Equals(value.trim().to_owned()) }
        } else if let Some((key, value)) = part.split_once('=') {
            Requirement { key: key.trim().to_owned(), op: Op::Equals(value.trim().to_owned()) }
        } else {
            return Err(ApiError::bad_request(format!(
                "invalid selector: '{selector}'; can't understand '{part}'"
            )));
        };
        requirements.push(requirement);
    }
    Ok(requirements)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors_follow_the_api_grammar() {
        let pod = json!({"metadata": {"name": "p", "labels": {"a": "b", "env": "x"}}, "status": {"phase": "Running"}});
        let check = |labels: &str| Selector::parse(Some(labels), None).unwrap().matches(&pod);
        for yes in
            ["a=b", "a==b", "a!=c", "a", "!z", "env in (x,y)", "env notin (y)", "z notin (y)", "a=b,env"]
        {
            assert!(check(yes), "{yes}");
        }
        for no in ["a=c", "a!=b", "z", "!a", "env in (y, z)", "env notin (x)", "a=b,z"] {
            assert!(!check(no), "{no}");
        }
        assert!(Selector::parse(Some("a in (x"), None).is_err());
        assert!(Selector::parse(Some("a=b c"), None).is_err());
        let fields = |f: &str| Selector::parse(None, Some(f)).unwrap().matches(&pod);
        assert!(fields("metadata.name=p") && fields("status.phase!=Pending") && !fields("metadata.name=q"));
    }
}
