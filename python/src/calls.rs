//! The verbs as values: what Python asked ([`Call`], built while the GIL is held), run against a
//! sandbox without it ([`Call::run`]), and the answer ([`Answer`]) turned into plain Python values
//! once the GIL is back. The Python layer wraps those in deepagents' result types.

use std::time::Duration;

use agentd_host::{
    BaseSandbox, ExecuteOffloadResult, ExecuteResponse, FileDownloadResponse, FileUploadResponse,
    OffloadRequest,
};
use agentd_protocol::fs::{FsRequest, FsResponse};
use agentd_protocol::profile::Enforcement;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::errors;

/// One request to a sandbox.
pub enum Call {
    Execute {
        command: String,
        timeout: Option<Duration>,
    },
    Offload(OffloadRequest),
    Upload(Vec<(String, Vec<u8>)>),
    Download(Vec<String>),
    /// One file saved to a local path, streamed (`download_file`).
    DownloadTo {
        path: String,
        local: std::path::PathBuf,
    },
    /// One of the seven file verbs, as `{"verb": "read", "path": …}` (the protocol's `FsRequest`).
    Fs(FsRequest),
    /// A process verb, as `{"verb": "spawn", …}` ([`ProcessCall`]).
    Process(ProcessCall),
    /// The profile's enforcement report from agentd's hello.
    Enforcement,
}

/// A process verb from Python: `{"verb": "spawn" | "result" | …, …arguments}`.
#[derive(Debug, serde::Deserialize)]
#[serde(tag = "verb", rename_all = "snake_case", deny_unknown_fields)]
pub enum ProcessCall {
    /// Starts a kept process; answers its id.
    Spawn {
        command: String,
        #[serde(default)]
        stdin: bool,
        #[serde(default)]
        pty: Option<(u16, u16)>,
        #[serde(default)]
        cwd: Option<String>,
        #[serde(default)]
        env: std::collections::BTreeMap<String, String>,
        #[serde(default)]
        timeout: Option<f64>,
        /// Its grace with no client attached, seconds (`0`: none).
        #[serde(default)]
        keep: Option<f64>,
    },
    /// Waits for its end; answers `(output, exit_code, truncated)` as `execute` does.
    Result {
        process: String,
    },
    /// Waits for its end; answers its output from byte `start`, as bytes.
    Output {
        process: String,
        start: u64,
    },
    /// Waits at most `timeout` seconds for its end; answers its info dict.
    Wait {
        process: String,
        timeout: Option<f64>,
    },
    Kill {
        process: String,
        signal: Option<String>,
    },
    WriteStdin {
        process: String,
        data: Vec<u8>,
    },
    CloseStdin {
        process: String,
    },
    Resize {
        process: String,
        rows: u16,
        cols: u16,
    },
    /// Every process: a list of info dicts.
    List,
}

impl Call {
    /// Whether each of its steps (making the request, writing it, reading the reply) is light
    /// enough for the event loop's own thread: not transfers, nor a `write` or `edit`, whose texts
    /// may be megabytes.
    pub fn starts_light(&self) -> bool {
        match self {
            Call::Execute { .. } | Call::Offload(_) => true,
            Call::Fs(request) => !matches!(request, FsRequest::Write { .. } | FsRequest::Edit { .. }),
            Call::Upload(_) | Call::Download(_) | Call::DownloadTo { .. } => false,
            Call::Enforcement => true,
            Call::Process(call) => {
                !matches!(call, ProcessCall::WriteStdin { .. } | ProcessCall::Output { .. })
            }
        }
    }
}

/// What a [`Call`] answered.
pub enum Answer {
    Execute(ExecuteResponse),
    Offload(ExecuteOffloadResult),
    Upload(Vec<FileUploadResponse>),
    Download(Vec<FileDownloadResponse>),
    /// The per-file error, `None` when saved.
    DownloadTo(Option<String>),
    Fs(FsResponse),
    /// A process's id.
    Spawned(String),
    Info(agentd_protocol::ProcessInfo),
    Infos(Vec<agentd_protocol::ProcessInfo>),
    Bytes(Vec<u8>),
    Count(u32),
    Done,
    /// The hello's report (`None`: agentd runs without a profile).
    Enforcement(Option<Enforcement>),
}

/// A process verb's request from its dict.
pub fn process_call(request: &Bound<'_, PyAny>) -> PyResult<ProcessCall> {
    pythonize::depythonize(request).map_err(|e| PyValueError::new_err(format!("bad process request: {e}")))
}

impl ProcessCall {
    /// Runs the verb over the sandbox's agentd link (reconnected if it dropped).
    async fn run(self, sandbox: &dyn BaseSandbox) -> agentd_host::Result<Answer> {
        let agentd = sandbox
            .agentd()
            .ok_or(agentd_host::SandboxError::Unsupported { kind: "this sandbox", feature: "processes" })?;
        let link = agentd.link().await?;
        Ok(match self {
            ProcessCall::Spawn { command, stdin, pty, cwd, env, timeout, keep } => {
                let request = agentd_protocol::ExecRequest {
                    command,
                    cwd,
                    env,
                    timeout,
                    keep: Some(keep.unwrap_or(0.0)),
                    stdin: stdin.then_some(agentd_protocol::StdinMode::Pipe),
                    pty: pty.map(|(rows, cols)| agentd_protocol::TerminalSize { rows, cols }),
                    ..agentd_protocol::ExecRequest::default()
                };
                Answer::Spawned(link.spawn(request).await?.process)
            }
            ProcessCall::Result { process } => {
                let result = link.attach(&process, 0, None, Some(0.0)).await?;
                Answer::Execute(agentd_host::contract::agentd::execute_response(&result)?)
            }
            ProcessCall::Output { process, start } => {
                let mut bytes = Vec::new();
                let mut collect = |data: &[u8]| bytes.extend_from_slice(data);
                link.attach(&process, start, Some(&mut collect), Some(0.0)).await?;
                Answer::Bytes(bytes)
            }
            ProcessCall::Wait { process, timeout } => {
                let timeout = timeout.filter(|t| *t > 0.0).map(Duration::try_from_secs_f64).transpose();
                let timeout = timeout.map_err(|e| agentd_host::SandboxError::Protocol(e.to_string()))?;
                Answer::Info(link.wait(&process, timeout).await?)
            }
            ProcessCall::Kill { process, signal } => {
                Answer::Count(link.kill(&process, signal.as_deref()).await?)
            }
            ProcessCall::WriteStdin { process, data } => {
                link.write_stdin(&process, &data).await?;
                Answer::Done
            }
            ProcessCall::CloseStdin { process } => {
                link.close_stdin(&process).await?;
                Answer::Done
            }
            ProcessCall::Resize { process, rows, cols } => {
                link.resize(&process, rows, cols).await?;
                Answer::Done
            }
            ProcessCall::List => Answer::Infos(link.processes().await?),
        })
    }
}

/// A timeout in seconds from Python: `None` is the sandbox's default, `0` no limit.
pub fn timeout(seconds: Option<f64>) -> PyResult<Option<Duration>> {
    seconds
        .map(|s| {
            Duration::try_from_secs_f64(s).map_err(|_| {
                PyValueError::new_err(format!("timeout must be a finite number of seconds >= 0, got {s}"))
            })
        })
        .transpose()
}

/// The deadlines of a link from Python's keyword arguments (seconds; `None`: from the
/// environment or the default).
pub fn deadlines(
    connect: Option<f64>,
    exec_margin: Option<f64>,
    silence: Option<f64>,
) -> PyResult<agentd_host::Deadlines> {
    let mut deadlines = agentd_host::Deadlines::from_env().map_err(errors::to_py)?;
    for (name, given, field) in [
        ("connect_deadline", connect, &mut deadlines.connect),
        ("exec_margin", exec_margin, &mut deadlines.exec_margin),
        ("silence_deadline", silence, &mut deadlines.silence),
    ] {
        if let Some(seconds) = given {
            *field = agentd_host::contract::deadlines::positive_seconds(seconds)
                .map_err(|why| PyValueError::new_err(format!("{name}: {why}, got {seconds}")))?;
        }
    }
    Ok(deadlines)
}

/// A file verb's request from its dict (`verb` plus the verb's arguments).
pub fn fs_request(request: &Bound<'_, PyAny>) -> PyResult<FsRequest> {
    pythonize::depythonize(request).map_err(|e| PyValueError::new_err(format!("bad file verb request: {e}")))
}

/// Files to upload from `[(path, bytes), …]`.
pub fn uploads(files: &Bound<'_, PyAny>) -> PyResult<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    for item in files.try_iter()? {
        let (path, content): (String, Bound<'_, PyBytes>) = item?.extract()?;
        out.push((path, content.as_bytes().to_vec()));
    }
    Ok(out)
}

impl Call {
    /// Runs the call. The file verbs go through the verb methods (not `fs` directly), so the
    /// contract's outer timeouts on `grep` and `glob` hold here too.
    pub async fn run(self, sandbox: &dyn BaseSandbox) -> agentd_host::Result<Answer> {
        Ok(match self {
            Call::Execute { command, timeout } => Answer::Execute(sandbox.execute(&command, timeout).await?),
            Call::Offload(request) => Answer::Offload(sandbox.execute_with_offload(&request).await?),
            Call::Upload(files) => Answer::Upload(sandbox.upload_files(&files).await?),
            Call::Download(paths) => Answer::Download(sandbox.download_files(&paths).await?),
            Call::DownloadTo { path, local } => {
                let saved =
                    agentd_host::contract::download::download_to_path(sandbox, &path, &local, |_, _| {})
                        .await?;
                Answer::DownloadTo(saved.err())
            }
            Call::Fs(request) => Answer::Fs(match request {
                FsRequest::Ls { path } => FsResponse::Ls(sandbox.ls(&path).await?),
                FsRequest::Read { path, offset, limit } => {
                    FsResponse::Read(sandbox.read(&path, offset, limit).await?)
                }
                FsRequest::Write { path, content } => {
                    FsResponse::Write(sandbox.write(&path, &content).await?)
                }
                FsRequest::Edit { path, old, new, replace_all } => {
                    FsResponse::Edit(sandbox.edit(&path, &old, &new, replace_all).await?)
                }
                FsRequest::Glob { pattern, path } => {
                    FsResponse::Glob(sandbox.glob(&pattern, path.as_deref()).await?)
                }
                FsRequest::Grep { pattern, path, glob, max_count } => FsResponse::Grep(
                    sandbox.grep(&pattern, path.as_deref(), glob.as_deref(), max_count).await?,
                ),
                FsRequest::Delete { path } => FsResponse::Delete(sandbox.delete(&path).await?),
            }),
            Call::Process(call) => call.run(sandbox).await?,
            Call::Enforcement => {
                let agentd = sandbox.agentd().ok_or(agentd_host::SandboxError::Unsupported {
                    kind: "this sandbox",
                    feature: "the enforcement report",
                })?;
                Answer::Enforcement(agentd.link().await?.hello().profile.clone())
            }
        })
    }
}

/// `(output, exit_code, truncated)`.
fn execute_tuple<'py>(py: Python<'py>, r: ExecuteResponse) -> PyResult<Bound<'py, PyTuple>> {
    (r.output, r.exit_code, r.truncated).into_pyobject(py)
}

impl Answer {
    /// The answer as Python values: `execute` gives `(output, exit_code, truncated)`; the offload
    /// `(offloaded, (output, exit_code, truncated), preview_has_truncation_marker)`; uploads
    /// `[(path, error)]`; downloads `[(path, bytes or None, error)]`; a file verb the dict of its
    /// result type, with the contract's field names.
    pub fn into_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let value = match self {
            Answer::Execute(r) => execute_tuple(py, r)?.into_any(),
            Answer::Offload(r) => {
                (r.offloaded, execute_tuple(py, r.response)?, r.preview_has_truncation_marker)
                    .into_pyobject(py)?
                    .into_any()
            }
            Answer::Upload(rs) => PyList::new(py, rs.into_iter().map(|r| (r.path, r.error)))?.into_any(),
            Answer::Download(rs) => {
                let items = rs
                    .into_iter()
                    .map(|r| (r.path, r.content.map(|c| PyBytes::new(py, &c)), r.error).into_pyobject(py))
                    .collect::<PyResult<Vec<_>>>()?;
                PyList::new(py, items)?.into_any()
            }
            Answer::DownloadTo(error) => error.into_pyobject(py)?.into_any(),
            Answer::Spawned(id) => id.into_pyobject(py)?.into_any(),
            Answer::Bytes(bytes) => PyBytes::new(py, &bytes).into_any(),
            Answer::Count(n) => n.into_pyobject(py)?.into_any(),
            Answer::Done => py.None().into_bound(py),
            Answer::Info(info) => pythonize::pythonize(py, &info)
                .map_err(|e| errors::named(py, "ProtocolError", format!("cannot convert the result: {e}")))?,
            Answer::Enforcement(report) => pythonize::pythonize(py, &report)
                .map_err(|e| errors::named(py, "ProtocolError", format!("cannot convert the report: {e}")))?,
            Answer::Infos(infos) => pythonize::pythonize(py, &infos)
                .map_err(|e| errors::named(py, "ProtocolError", format!("cannot convert the result: {e}")))?,
            Answer::Fs(response) => {
                let result = match &response {
                    FsResponse::Ls(r) => pythonize::pythonize(py, r),
                    FsResponse::Read(r) => pythonize::pythonize(py, r),
                    FsResponse::Write(r) => pythonize::pythonize(py, r),
                    FsResponse::Edit(r) => pythonize::pythonize(py, r),
                    FsResponse::Glob(r) => pythonize::pythonize(py, r),
                    FsResponse::Grep(r) => pythonize::pythonize(py, r),
                    FsResponse::Delete(r) => pythonize::pythonize(py, r),
                };
                result.map_err(|e| {
                    errors::named(py, "ProtocolError", format!("cannot convert the result: {e}"))
                })?
            }
        };
        Ok(value.unbind())
    }
}
