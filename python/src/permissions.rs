//! Path permission rules from Python in their wire form: a `{"operations", "paths", "mode"}` dict
//! or a `MODE:OPERATIONS:PATH` string, read and checked by `agentd_protocol::permission`, the one
//! parser a profile's, a request's and agentctl's rules go through too. What is Python's
//! (deepagents' `FilesystemPermission` objects, its `interrupt` mode) the Python layer turns into
//! this form first (`agentd.permission_rules`, which calls [`permission_rule`] for each rule).

use agentd_protocol::permission::PermissionRule;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyMapping, PyString};

/// One rule in wire form, checked as agentd checks a profile's. The error says what is wrong and
/// leaves the rule out: the caller names it, with its position.
pub fn rule(item: &Bound<'_, PyAny>) -> Result<PermissionRule, String> {
    if let Ok(text) = item.cast::<PyString>() {
        return text.to_str().map_err(|e| e.to_string())?.parse();
    }
    let Ok(fields) = item.cast::<PyMapping>() else {
        return Err(format!(
            "a rule is a dict with operations, paths and mode, or a MODE:OPERATIONS:PATH string, not {}",
            type_name(item)
        ));
    };
    // A str is a sequence to Python: depythonize would read `"paths": "/ws"` as the paths "/",
    // "w" and "s", and "/" is a valid one.
    for (field, example) in [("operations", r#"["read"], ["read", "write"]"#), ("paths", r#"["/ws/src/**"]"#)]
    {
        if let Ok(value) = fields.get_item(field)
            && value.is_instance_of::<PyString>()
        {
            return Err(format!("{field} must be a list ({example}), got {}", repr(&value)));
        }
    }
    let rule: PermissionRule =
        serde_path_to_error::deserialize(&mut pythonize::Depythonizer::from_object(item)).map_err(at)?;
    rule.validate()?;
    Ok(rule)
}

/// A deserialization error with where it happened (`paths[0]: unexpected type: …`), unless the
/// message names it already (`mode 'block' is not …`, an unknown field) or it is the rule itself
/// (a missing field).
fn at(error: serde_path_to_error::Error<pythonize::PythonizeError>) -> String {
    let path = error.path().to_string();
    let why = error.inner().to_string();
    if path == "." || why.contains(&path) { why } else { format!("{path}: {why}") }
}

/// Rules for a sandbox's profile, from a list of rules in wire form; a bad one is a `ValueError`
/// naming its position and text (`permissions[1] {…}: …`), as `agentd.permission_rules` names it.
pub fn rules(list: &Bound<'_, PyAny>) -> PyResult<Vec<PermissionRule>> {
    let mut out = Vec::new();
    for (index, item) in list.try_iter()?.enumerate() {
        let item = item?;
        match rule(&item) {
            Ok(rule) => out.push(rule),
            Err(why) => {
                return Err(PyValueError::new_err(format!("permissions[{index}] {}: {why}", repr(&item))));
            }
        }
    }
    Ok(out)
}

/// One path permission rule, a dict or a `MODE:OPERATIONS:PATH` string, as agentd reads it: its
/// dict (`{"operations", "paths", "mode"}`, `mode` filled in), or `ValueError` saying what is wrong.
#[pyfunction]
pub fn permission_rule<'py>(py: Python<'py>, rule: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let rule = self::rule(rule).map_err(PyValueError::new_err)?;
    Ok(pythonize::pythonize(py, &rule)?)
}

/// Python's `repr(value)`, or a stand-in when its `__repr__` fails (the message is still raised).
fn repr(value: &Bound<'_, PyAny>) -> String {
    value.repr().map_or_else(|_| format!("<{}>", type_name(value)), |r| r.to_string())
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value.get_type().name().map_or_else(|_| "?".to_owned(), |n| n.to_string())
}
