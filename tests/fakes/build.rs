//! Compiles the Modal `.proto` subset kept in `host/proto/` (one copy, shared with the adapter) into
//! the servers the fake Modal implements (protox: no `protoc` needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const PROTOS: [&str; 2] = [
        "../../host/proto/modal/client/api.proto",
        "../../host/proto/modal/task_command_router/task_command_router.proto",
    ];
    println!("cargo:rerun-if-changed=../../host/proto");
    let files = protox::compile(PROTOS, ["../../host/proto"])?;
    tonic_prost_build::configure().build_client(false).build_server(true).compile_fds(files)?;
    Ok(())
}
