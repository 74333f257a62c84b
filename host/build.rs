//! Compiles the Modal `.proto` subset in `proto/` (feature `modal`) with protox: no `protoc` needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    #[cfg(feature = "modal")]
    {
        const PROTOS: [&str; 2] =
            ["proto/modal/client/api.proto", "proto/modal/task_command_router/task_command_router.proto"];
        println!("cargo:rerun-if-changed=proto");
        let files = protox::compile(PROTOS, ["proto"])?;
        tonic_prost_build::configure().build_server(false).compile_fds(files)?;
    }
    Ok(())
}
