//! Compiles the .proto schema with protox (pure Rust, no system protoc).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/frame.proto",
        "proto/control.proto",
        "proto/prometheus/remote.proto",
    ];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    prost_build::Config::new().compile_fds(fds)?;
    Ok(())
}
