//! The offsale-listener Lambda function: build configuration and clients once, then serve.

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use lifeboat_aws::{Clients, Env};
use offsale_listener::OffsaleListener;
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lifeboat_aws::logs::init();
    let env = Env::from_process();
    let sdk = lifeboat_aws::clients::load_function_config().await;
    let ssm = aws_sdk_ssm::Client::new(&sdk);
    let function = OffsaleListener::from_env(&env, &Clients::new(&sdk), &ssm).await?;
    let function = &function;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        // The schedule's tick sweeps; anything else is an SQS batch.
        if offsale_listener::sweep::is_schedule(&event.payload) {
            return Ok::<Value, offsale_listener::ListenerError>(function.sweep().await.to_json());
        }
        let report = function.handle(&event.payload).await?;
        serde_json::to_value(report.response)
            .map_err(|e| offsale_listener::ListenerError::Response(e.to_string()))
    }))
    .await
}
