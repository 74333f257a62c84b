//! The control plane (`modal.client.ModalClient`): apps, images (a `FROM <image>` names a local
//! Docker image), sandboxes as containers, tunnels to their published ports, router access.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};

use super::proto::client::generic_result::GenericStatus;
use super::proto::client::modal_client_server::{ModalClient, ModalClientServer};
use super::proto::client::*;
use super::{CONTAINER_LABEL, Shared, lock, now_secs};
use crate::containers;

/// Longest a long poll (`SandboxWait`, `ImageJoinStreaming`) holds a call.
const LONG_POLL_CAP: Duration = Duration::from_secs(55);

/// A gRPC server-streaming response.
pub(crate) type GrpcStream<T> =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The stream of what is sent on `rx`, ending when every sender is gone.
pub(crate) fn stream_of<T: Send + 'static>(
    rx: tokio::sync::mpsc::Receiver<Result<T, Status>>,
) -> GrpcStream<T> {
    Box::pin(futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) }))
}

/// An image: the local Docker image behind it and how its build ended.
pub struct Image {
    pub docker: String,
    pub result: GenericResult,
    /// Whether a client saw the result already (the first `ImageGetOrCreate` leaves it out, so
    /// clients take the `ImageJoinStreaming` path as with a fresh build).
    pub built: bool,
}

/// A sandbox as the fake keeps it.
pub struct Sandbox {
    pub id: String,
    pub app_id: String,
    pub task_id: String,
    pub image_id: String,
    pub name: Option<String>,
    pub tags: Vec<SandboxTag>,
    pub created_at: f64,
    pub timeout_secs: u32,
    /// None once the sandbox has ended (its container is removed then).
    pub container: Option<String>,
    pub tunnels: Vec<TunnelData>,
    /// Set when the sandbox has ended.
    pub result: Option<GenericResult>,
    /// `SandboxGetTaskId` calls so far (the first answers "not yet").
    pub task_id_polls: u32,
}

/// Apps, images and sandboxes.
#[derive(Default)]
pub struct State {
    /// (environment, app name) → app id.
    pub apps: HashMap<(String, String), String>,
    pub images: HashMap<String, Image>,
    /// Docker image → image id.
    pub image_ids: HashMap<String, String>,
    pub sandboxes: HashMap<String, Sandbox>,
}

impl State {
    fn sandbox(&mut self, id: &str) -> Result<&mut Sandbox, Status> {
        self.sandboxes.get_mut(id).ok_or_else(|| Status::not_found(format!("sandbox {id} not found")))
    }
}

fn result(status: GenericStatus, exception: &str, exitcode: i32) -> GenericResult {
    GenericResult { status: status as i32, exception: exception.to_owned(), exitcode }
}

/// Ends sandbox `id` with `ended` (unless it has ended already): its execs report SIGKILL, its
/// container is removed.
pub(crate) async fn finish(shared: &Shared, id: &str, ended: GenericResult) {
    let (container, task_id) = {
        let mut state = lock(&shared.state);
        let Some(sandbox) = state.sandboxes.get_mut(id) else {
            return;
        };
        if sandbox.result.is_some() {
            return;
        }
        sandbox.result = Some(ended);
        (sandbox.container.take(), sandbox.task_id.clone())
    };
    for exec in lock(&shared.execs).values().filter(|e| e.task_id == task_id) {
        exec.mark_killed();
    }
    if let Some(container) = container {
        containers::remove(&container).await;
    }
}

pub(crate) fn service(shared: Arc<Shared>) -> ModalClientServer<Control> {
    ModalClientServer::new(Control { shared })
        .max_decoding_message_size(100 << 20)
        .max_encoding_message_size(100 << 20)
}

pub struct Control {
    shared: Arc<Shared>,
}

impl Control {
    fn image_get_or_create_inner(
        &self,
        request: ImageGetOrCreateRequest,
    ) -> Result<ImageGetOrCreateResponse, Status> {
        let commands = request.image.map(|image| image.dockerfile_commands).unwrap_or_default();
        let docker = commands
            .iter()
            .find_map(|line| {
                let (word, rest) = line.trim().split_once(char::is_whitespace)?;
                word.eq_ignore_ascii_case("FROM").then(|| rest.trim().to_owned())
            })
            .ok_or_else(|| Status::invalid_argument("the image has no `FROM <image>` command"))?;
        let mut state = lock(&self.shared.state);
        let image_id = match state.image_ids.get(&docker) {
            Some(id) => id.clone(),
            None => {
                let id = format!("im-{}", crate::random_hex(12));
                // Whether it exists is looked up by the caller below, outside the lock.
                state.image_ids.insert(docker.clone(), id.clone());
                state.images.insert(
                    id.clone(),
                    Image { docker: docker.clone(), result: GenericResult::default(), built: false },
                );
                id
            }
        };
        let image = state.images.get_mut(&image_id).ok_or_else(|| Status::internal("image vanished"))?;
        let result = image.built.then(|| image.result.clone());
        image.built = true;
        Ok(ImageGetOrCreateResponse { image_id, result, metadata: Some(image_metadata()) })
    }
    fn task_id(&self, request: SandboxGetTaskIdRequest) -> Result<SandboxGetTaskIdResponse, Status> {
        let mut state = lock(&self.shared.state);
        let sandbox = state.sandbox(&request.sandbox_id)?;
        sandbox.task_id_polls += 1;
        Ok(match &sandbox.result {
            Some(ended) => SandboxGetTaskIdResponse {
                task_id: Some(sandbox.task_id.clone()),
                task_result: Some(ended.clone()),
            },
            // The first poll finds the task still scheduling (unless the client asks to wait).
            None if sandbox.task_id_polls == 1 && !request.wait_until_ready => {
                SandboxGetTaskIdResponse::default()
            }
            None => SandboxGetTaskIdResponse { task_id: Some(sandbox.task_id.clone()), task_result: None },
        })
    }

    fn tunnels(&self, request: SandboxGetTunnelsRequest) -> Result<SandboxGetTunnelsResponse, Status> {
        let none = *lock(&self.shared.no_tunnels);
        let mut state = lock(&self.shared.state);
        let sandbox = state.sandbox(&request.sandbox_id)?;
        Ok(SandboxGetTunnelsResponse {
            result: Some(result(GenericStatus::Success, "", 0)),
            tunnels: if none { Vec::new() } else { sandbox.tunnels.clone() },
        })
    }

    /// Long-polls up to `timeout` (capped) for the sandbox's end.
    async fn wait(&self, request: SandboxWaitRequest) -> Result<SandboxWaitResponse, Status> {
        let limit = Duration::try_from_secs_f32(request.timeout.max(0.0)).unwrap_or(LONG_POLL_CAP);
        let deadline = tokio::time::Instant::now() + limit.min(LONG_POLL_CAP);
        loop {
            let (ended, app_id) = {
                let mut state = lock(&self.shared.state);
                let sandbox = state.sandbox(&request.sandbox_id)?;
                (sandbox.result.clone(), sandbox.app_id.clone())
            };
            match ended {
                Some(ended) => {
                    return Ok(SandboxWaitResponse {
                        result: Some(ended.clone()),
                        metadata: Some(SandboxHandleMetadata { result: Some(ended), app_id }),
                    });
                }
                None if tokio::time::Instant::now() >= deadline => return Ok(SandboxWaitResponse::default()),
                None => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// Newest first: those of the app (when given), running (unless finished ones are asked for),
    /// before the timestamp (when given), carrying every tag asked for.
    fn list(&self, request: SandboxListRequest) -> SandboxListResponse {
        let state = lock(&self.shared.state);
        let mut sandboxes: Vec<SandboxInfo> = state
            .sandboxes
            .values()
            .filter(|s| request.app_id.is_empty() || s.app_id == request.app_id)
            .filter(|s| request.include_finished || s.result.is_none())
            .filter(|s| request.before_timestamp <= 0.0 || s.created_at < request.before_timestamp)
            .filter(|s| request.tags.iter().all(|want| s.tags.contains(want)))
            .map(|s| SandboxInfo {
                id: s.id.clone(),
                created_at: s.created_at,
                task_info: Some(TaskInfo {
                    id: s.task_id.clone(),
                    started_at: s.created_at,
                    finished_at: 0.0,
                    result: s.result.clone(),
                    sandbox_id: s.id.clone(),
                }),
                app_id: s.app_id.clone(),
                tags: s.tags.clone(),
                name: s.name.clone().unwrap_or_default(),
                image_id: s.image_id.clone(),
                timeout_secs: s.timeout_secs,
            })
            .collect();
        sandboxes.sort_by(|a, b| b.created_at.total_cmp(&a.created_at));
        SandboxListResponse { sandboxes }
    }

    async fn terminate(&self, request: SandboxTerminateRequest) -> Result<SandboxTerminateResponse, Status> {
        let id = request.sandbox_id;
        lock(&self.shared.terminated).push(id.clone());
        let existing = lock(&self.shared.state).sandbox(&id)?.result.clone();
        if existing.is_none() {
            finish(&self.shared, &id, result(GenericStatus::Terminated, "", -1)).await;
        }
        Ok(SandboxTerminateResponse { existing_result: existing })
    }

    /// A fresh router JWT and the router's URL, for a running task.
    fn router_access(&self, task_id: &str) -> Result<(String, String), Status> {
        let live = lock(&self.shared.state)
            .sandboxes
            .values()
            .find(|s| s.task_id == task_id)
            .map(|s| s.result.is_none());
        match live {
            None => Err(Status::not_found(format!("task {task_id} not found"))),
            Some(false) => Err(Status::failed_precondition(format!("task {task_id} has finished"))),
            Some(true) => Ok((self.shared.mint_jwt(task_id, true), self.shared.router_url.clone())),
        }
    }
}

fn image_metadata() -> ImageMetadata {
    ImageMetadata { workdir: None, image_builder_version: Some("2024.10".to_owned()) }
}

#[tonic::async_trait]
impl ModalClient for Control {
    async fn auth_token_get(
        &self,
        request: Request<AuthTokenGetRequest>,
    ) -> Result<Response<AuthTokenGetResponse>, Status> {
        let call = self.shared.begin_control("AuthTokenGet", request.metadata())?;
        call.end(Ok(Response::new(AuthTokenGetResponse { token: self.shared.mint_jwt("auth", false) })))
    }

    async fn environment_get_or_create(
        &self,
        request: Request<EnvironmentGetOrCreateRequest>,
    ) -> Result<Response<EnvironmentGetOrCreateResponse>, Status> {
        let call = self.shared.begin_control("EnvironmentGetOrCreate", request.metadata())?;
        let name = request.into_inner().deployment_name;
        let name = if name.is_empty() { "main".to_owned() } else { name };
        call.end(Ok(Response::new(EnvironmentGetOrCreateResponse {
            environment_id: format!("en-{}", name.bytes().map(|b| format!("{b:02x}")).collect::<String>()),
            metadata: Some(EnvironmentMetadata {
                name,
                settings: Some(EnvironmentSettings { image_builder_version: "2024.10".to_owned() }),
            }),
        })))
    }

    async fn app_get_or_create(
        &self,
        request: Request<AppGetOrCreateRequest>,
    ) -> Result<Response<AppGetOrCreateResponse>, Status> {
        let call = self.shared.begin_control("AppGetOrCreate", request.metadata())?;
        let request = request.into_inner();
        let key = (request.environment_name.clone(), request.app_name.clone());
        let mut state = lock(&self.shared.state);
        let existing = state.apps.get(&key).cloned();
        let fresh = || format!("ap-{}", crate::random_hex(12));
        let app_id = match (ObjectCreationType::try_from(request.object_creation_type), existing) {
            (Ok(ObjectCreationType::Unspecified), None) => {
                return call.end(Err(Status::not_found(format!("app {} not found", request.app_name))));
            }
            (Ok(ObjectCreationType::CreateFailIfExists), Some(_)) => {
                return call.end(Err(Status::already_exists(format!("app {} exists", request.app_name))));
            }
            (Ok(ObjectCreationType::AnonymousOwnedByApp | ObjectCreationType::Ephemeral), _) => fresh(),
            (Ok(ObjectCreationType::CreateOverwriteIfExists), _) | (_, None) => {
                let id = fresh();
                state.apps.insert(key, id.clone());
                id
            }
            (_, Some(id)) => id,
        };
        call.end(Ok(Response::new(AppGetOrCreateResponse { app_id })))
    }

    async fn image_get_or_create(
        &self,
        request: Request<ImageGetOrCreateRequest>,
    ) -> Result<Response<ImageGetOrCreateResponse>, Status> {
        let call = self.shared.begin_control("ImageGetOrCreate", request.metadata())?;
        let response = self.image_get_or_create_inner(request.into_inner());
        if let Ok(response) = &response {
            // Look the Docker image up once, when the fake first sees it.
            let docker = lock(&self.shared.state)
                .images
                .get(&response.image_id)
                .filter(|image| image.result.status == GenericStatus::Unspecified as i32)
                .map(|image| image.docker.clone());
            if let Some(docker) = docker {
                let built = if containers::image_exists(&docker).await {
                    result(GenericStatus::Success, "", 0)
                } else {
                    let message = format!("fake-modal: no local Docker image {docker}");
                    result(GenericStatus::Failure, &message, 1)
                };
                if let Some(image) = lock(&self.shared.state).images.get_mut(&response.image_id) {
                    image.result = built;
                }
            }
        }
        call.end(response.map(Response::new))
    }

    type ImageJoinStreamingStream = GrpcStream<ImageJoinStreamingResponse>;

    async fn image_join_streaming(
        &self,
        request: Request<ImageJoinStreamingRequest>,
    ) -> Result<Response<Self::ImageJoinStreamingStream>, Status> {
        let call = self.shared.begin_control("ImageJoinStreaming", request.metadata())?;
        let request = request.into_inner();
        let image = lock(&self.shared.state)
            .images
            .get(&request.image_id)
            .map(|image| (image.docker.clone(), image.result.clone()));
        let Some((docker, built)) = image else {
            return call.end(Err(Status::not_found(format!("image {} not found", request.image_id))));
        };
        // A log entry, then the result (resuming after the log entry skips it).
        let mut messages = Vec::new();
        if request.last_entry_id.is_empty() {
            messages.push(ImageJoinStreamingResponse {
                task_logs: vec![TaskLogs { data: format!("fake-modal: using local image {docker}\n") }],
                entry_id: "1".to_owned(),
                ..Default::default()
            });
        }
        messages.push(ImageJoinStreamingResponse {
            result: Some(built),
            entry_id: "2".to_owned(),
            eof: true,
            metadata: Some(image_metadata()),
            ..Default::default()
        });
        let (tx, rx) = tokio::sync::mpsc::channel(messages.len());
        for message in messages {
            let _ = tx.try_send(Ok(message));
        }
        call.end(Ok(Response::new(stream_of(rx))))
    }

    async fn sandbox_create(
        &self,
        request: Request<SandboxCreateRequest>,
    ) -> Result<Response<SandboxCreateResponse>, Status> {
        let call = self.shared.begin_control("SandboxCreate", request.metadata())?;
        call.end(create(&self.shared, request.into_inner()).await.map(Response::new))
    }

    async fn sandbox_get_task_id(
        &self,
        request: Request<SandboxGetTaskIdRequest>,
    ) -> Result<Response<SandboxGetTaskIdResponse>, Status> {
        let call = self.shared.begin_control("SandboxGetTaskId", request.metadata())?;
        call.end(self.task_id(request.into_inner()).map(Response::new))
    }

    async fn sandbox_get_tunnels(
        &self,
        request: Request<SandboxGetTunnelsRequest>,
    ) -> Result<Response<SandboxGetTunnelsResponse>, Status> {
        let call = self.shared.begin_control("SandboxGetTunnels", request.metadata())?;
        call.end(self.tunnels(request.into_inner()).map(Response::new))
    }

    async fn sandbox_wait(
        &self,
        request: Request<SandboxWaitRequest>,
    ) -> Result<Response<SandboxWaitResponse>, Status> {
        let call = self.shared.begin_control("SandboxWait", request.metadata())?;
        call.end(self.wait(request.into_inner()).await.map(Response::new))
    }

    async fn sandbox_list(
        &self,
        request: Request<SandboxListRequest>,
    ) -> Result<Response<SandboxListResponse>, Status> {
        let call = self.shared.begin_control("SandboxList", request.metadata())?;
        call.end(Ok(Response::new(self.list(request.into_inner()))))
    }

    async fn sandbox_terminate(
        &self,
        request: Request<SandboxTerminateRequest>,
    ) -> Result<Response<SandboxTerminateResponse>, Status> {
        let call = self.shared.begin_control("SandboxTerminate", request.metadata())?;
        call.end(self.terminate(request.into_inner()).await.map(Response::new))
    }

    async fn sandbox_create_v2(
        &self,
        request: Request<SandboxCreateV2Request>,
    ) -> Result<Response<SandboxCreateV2Response>, Status> {
        let call = self.shared.begin_v2("SandboxCreateV2", request.metadata())?;
        let request = request.into_inner();
        let v1 = SandboxCreateRequest {
            app_id: request.app_id,
            definition: request.definition,
            tags: request.tags,
            ..Default::default()
        };
        let created = match create(&self.shared, v1).await {
            Ok(created) => created,
            Err(status) => return call.end(Err(status)),
        };
        // A V2 create answers with the task, its tunnels and router access at once.
        let (task_id, tunnels) = lock(&self.shared.state)
            .sandboxes
            .get(&created.sandbox_id)
            .map(|s| (s.task_id.clone(), s.tunnels.clone()))
            .unwrap_or_default();
        let tunnels = if *lock(&self.shared.no_tunnels) { Vec::new() } else { tunnels };
        call.end(Ok(Response::new(SandboxCreateV2Response {
            command_router_access: Some(CommandRouterAccess {
                jwt: self.shared.mint_jwt(&task_id, true),
                url: self.shared.router_url.clone(),
            }),
            sandbox_id: created.sandbox_id,
            tunnels,
            task_id,
            metadata: created.metadata,
            sandbox_token: String::new(),
        })))
    }

    async fn sandbox_get_task_id_v2(
        &self,
        request: Request<SandboxGetTaskIdRequest>,
    ) -> Result<Response<SandboxGetTaskIdResponse>, Status> {
        let call = self.shared.begin_v2("SandboxGetTaskIdV2", request.metadata())?;
        call.end(self.task_id(request.into_inner()).map(Response::new))
    }

    async fn sandbox_get_tunnels_v2(
        &self,
        request: Request<SandboxGetTunnelsRequest>,
    ) -> Result<Response<SandboxGetTunnelsResponse>, Status> {
        let call = self.shared.begin_v2("SandboxGetTunnelsV2", request.metadata())?;
        call.end(self.tunnels(request.into_inner()).map(Response::new))
    }

    async fn sandbox_wait_v2(
        &self,
        request: Request<SandboxWaitRequest>,
    ) -> Result<Response<SandboxWaitResponse>, Status> {
        let call = self.shared.begin_v2("SandboxWaitV2", request.metadata())?;
        call.end(self.wait(request.into_inner()).await.map(Response::new))
    }

    async fn sandbox_list_v2(
        &self,
        request: Request<SandboxListRequest>,
    ) -> Result<Response<SandboxListResponse>, Status> {
        let call = self.shared.begin_v2("SandboxListV2", request.metadata())?;
        call.end(Ok(Response::new(self.list(request.into_inner()))))
    }

    async fn sandbox_terminate_v2(
        &self,
        request: Request<SandboxTerminateRequest>,
    ) -> Result<Response<SandboxTerminateResponse>, Status> {
        let call = self.shared.begin_v2("SandboxTerminateV2", request.metadata())?;
        call.end(self.terminate(request.into_inner()).await.map(Response::new))
    }

    async fn sandbox_get_command_router_access(
        &self,
        request: Request<SandboxGetCommandRouterAccessRequest>,
    ) -> Result<Response<SandboxGetCommandRouterAccessResponse>, Status> {
        use sandbox_get_command_router_access_request::Target;
        let call = self.shared.begin_v2("SandboxGetCommandRouterAccess", request.metadata())?;
        let task_id = match request.into_inner().target {
            Some(Target::TaskId(task_id)) => Ok(task_id),
            Some(Target::SandboxId(id)) => lock(&self.shared.state).sandbox(&id).map(|s| s.task_id.clone()),
            None => Err(Status::invalid_argument("sandbox_id or task_id is required")),
        };
        let access = match task_id {
            Ok(task_id) => self.router_access(&task_id),
            Err(status) => Err(status),
        };
        call.end(access.map(|(jwt, url)| Response::new(SandboxGetCommandRouterAccessResponse { jwt, url })))
    }

    async fn sandbox_create_connect_token(
        &self,
        request: Request<SandboxCreateConnectTokenRequest>,
    ) -> Result<Response<SandboxCreateConnectTokenResponse>, Status> {
        let call = self.shared.begin_control("SandboxCreateConnectToken", request.metadata())?;
        let request = request.into_inner();
        let port = request.port.unwrap_or(8080);
        let mut state = lock(&self.shared.state);
        let response = state.sandbox(&request.sandbox_id).and_then(|sandbox| {
            let tunnel = sandbox.tunnels.iter().find(|t| t.container_port == port).ok_or_else(|| {
                Status::failed_precondition(format!("port {port} is not an open port of the sandbox"))
            })?;
            Ok(SandboxCreateConnectTokenResponse {
                url: format!("http://{}:{}", tunnel.host, tunnel.port),
                token: crate::random_hex(16),
            })
        });
        call.end(response.map(Response::new))
    }

    async fn task_get_command_router_access(
        &self,
        request: Request<TaskGetCommandRouterAccessRequest>,
    ) -> Result<Response<TaskGetCommandRouterAccessResponse>, Status> {
        let call = self.shared.begin_control("TaskGetCommandRouterAccess", request.metadata())?;
        let access = self.router_access(&request.into_inner().task_id);
        call.end(access.map(|(jwt, url)| Response::new(TaskGetCommandRouterAccessResponse { jwt, url })))
    }
}

/// Counts a `docker run` in flight for as long as it lives (see [`FakeModal`](super::FakeModal)'s
/// drop).
struct Creating<'a>(&'a Shared);

impl<'a> Creating<'a> {
    fn count(shared: &'a Shared) -> Self {
        shared.creating.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Self(shared)
    }
}

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        self.0.creating.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `SandboxCreate`: checks the definition, starts the container, records the sandbox and starts
/// its lifetime clock and the watch on its main process.
async fn create(
    shared: &Arc<Shared>,
    request: SandboxCreateRequest,
) -> Result<SandboxCreateResponse, Status> {
    let definition = request.definition.ok_or_else(|| Status::invalid_argument("definition is required"))?;
    if definition.timeout_secs == 0 {
        return Err(Status::invalid_argument("timeout_secs must be > 0"));
    }
    let docker = {
        let state = lock(&shared.state);
        if !state.apps.values().any(|id| *id == request.app_id) {
            return Err(Status::not_found(format!("app {} not found", request.app_id)));
        }
        if let Some(name) = &definition.name
            && state.sandboxes.values().any(|s| s.result.is_none() && s.name.as_ref() == Some(name))
        {
            return Err(Status::already_exists(format!("a sandbox named {name} is running")));
        }
        let image = state
            .images
            .get(&definition.image_id)
            .ok_or_else(|| Status::not_found(format!("image {} not found", definition.image_id)))?;
        if image.result.status != GenericStatus::Success as i32 {
            return Err(Status::failed_precondition(format!("image {} did not build", definition.image_id)));
        }
        image.docker.clone()
    };
    let id = format!("sb-{}", crate::random_hex(12));
    let ports: Vec<u16> = match &definition.open_ports_oneof {
        Some(super::proto::client::sandbox::OpenPortsOneof::OpenPorts(specs)) => {
            specs.ports.iter().filter_map(|p| u16::try_from(p.port).ok()).collect()
        }
        None => Vec::new(),
    };
    let env: std::collections::BTreeMap<String, String> =
        definition.environment_variables.map(|m| m.contents.into_iter().collect()).unwrap_or_default();
    let mounts = shared.mounts();
    let workdir =
        definition.workdir.clone().or_else(|| mounts.last().map(|d| d.to_string_lossy().into_owned()));
    let counted = Creating::count(shared);
    let container = containers::run(&containers::Spec {
        label: CONTAINER_LABEL,
        instance: &shared.instance,
        sandbox: &id,
        image: &docker,
        env: &env,
        mounts: &mounts,
        workdir: workdir.as_deref(),
        command: &definition.entrypoint_args,
        publish: &ports,
    })
    .await
    .map_err(|message| Status::internal(format!("fake-modal: docker run: {message}")))?;
    drop(counted);
    let mut tunnels = Vec::new();
    for port in ports {
        let Some(host_port) = containers::published_port(&container, port).await else {
            containers::remove(&container).await;
            return Err(Status::internal(format!("fake-modal: port {port} was not published")));
        };
        tunnels.push(TunnelData {
            host: "127.0.0.1".to_owned(),
            port: u32::from(host_port),
            unencrypted_host: None,
            unencrypted_port: None,
            container_port: u32::from(port),
        });
    }
    lock(&shared.state).sandboxes.insert(
        id.clone(),
        Sandbox {
            id: id.clone(),
            app_id: request.app_id.clone(),
            task_id: format!("ta-{}", crate::random_hex(12)),
            image_id: definition.image_id.clone(),
            name: definition.name.clone(),
            tags: request.tags,
            created_at: now_secs(),
            timeout_secs: definition.timeout_secs,
            container: Some(container.clone()),
            tunnels,
            result: None,
            task_id_polls: 0,
        },
    );
    // The lifetime: past `timeout_secs` the sandbox ends with TIMEOUT.
    let lifetime = Duration::from_secs(u64::from(definition.timeout_secs));
    let (timer_shared, timer_id) = (shared.clone(), id.clone());
    tokio::spawn(async move {
        tokio::time::sleep(lifetime).await;
        finish(&timer_shared, &timer_id, result(GenericStatus::Timeout, "", 0)).await;
    });
    // The main process ending (an entrypoint that exits) ends the sandbox with its exit code.
    let (watch_shared, watch_id) = (shared.clone(), id.clone());
    tokio::spawn(async move {
        if let Some(code) = containers::wait(&container).await {
            let status = if code == 0 { GenericStatus::Success } else { GenericStatus::Failure };
            finish(&watch_shared, &watch_id, result(status, "", code)).await;
        }
    });
    Ok(SandboxCreateResponse {
        sandbox_id: id,
        metadata: Some(SandboxHandleMetadata { result: None, app_id: request.app_id }),
    })
}
