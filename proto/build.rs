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

    // The scheduler gRPC API: messages and tonic service code, plus the
    // encoded descriptor set that gRPC server reflection serves.
    println!("cargo:rerun-if-changed=proto/api.proto");
    let mut api = protox::Compiler::new(["proto"])?;
    api.include_imports(true).include_source_info(true);
    api.open_files(["proto/api.proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("canopy_api_descriptor.bin"),
        api.encode_file_descriptor_set(),
    )?;
    tonic_prost_build::configure().compile_fds(api.file_descriptor_set())?;
    Ok(())
}
