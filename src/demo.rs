pub async fn run() -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("demo pending")
}
