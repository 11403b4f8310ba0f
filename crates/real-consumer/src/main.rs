//! The real-consumer Lambda function: build configuration and clients once, then serve.

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use lifeboat_aws::{Clients, Env};
use real_consumer::RealConsumer;
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lifeboat_aws::logs::init();
    let env = Env::from_process();
    let function = RealConsumer::from_env(&env, &Clients::load_in_function().await).await?;
    let function = &function;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        function
            .handle(&event.payload)
            .await
            .map(|report| report.response)
    }))
    .await
}
