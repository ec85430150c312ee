//! Compiles the sidecar protocol with protox (a protobuf compiler in Rust),
//! so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = "../../proto";
    let file = "txgate/sidecar/v1/heuristics.proto";
    println!("cargo:rerun-if-changed={root}/{file}");
    let descriptors = protox::compile([file], [root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
