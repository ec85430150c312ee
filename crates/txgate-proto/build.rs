//! Compiles the sidecar protocols and the pool plugin's Aeges service
//! with protox (a protobuf compiler in Rust), so no system `protoc` is
//! needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = "../../proto";
    let files = [
        "txgate/sidecar/v1/heuristics.proto",
        "rpcproxy/v1/heuristics.proto",
        "sidecar/transport/v1/results.proto",
        "aeges/v1/aeges.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={root}/{file}");
    }
    let descriptors = protox::compile(files, [root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // The pool's transactions: byte fields borrow the request buffer
        // instead of copying the calldata.
        .bytes(".aeges.v1")
        .compile_fds(descriptors)?;
    Ok(())
}
