//! Compiles the sidecar protocols with protox (a protobuf compiler in
//! Rust), so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = "../../proto";
    let files = [
        "txgate/sidecar/v1/heuristics.proto",
        "rpcproxy/v1/heuristics.proto",
        "sidecar/transport/v1/results.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={root}/{file}");
    }
    let descriptors = protox::compile(files, [root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
