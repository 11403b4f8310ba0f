//! The booking-worker Lambda function: build configuration and clients once, then serve.

use booking_worker::BookingWorker;
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use lifeboat_aws::{Clients, Env};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lifeboat_aws::logs::init();
    let env = Env::from_process();
    let worker = BookingWorker::from_env(&env, &Clients::load_in_function().await).await?;
    let worker = &worker;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        worker
            .handle(&event.payload)
            .await
            .map(|report| report.to_json())
    }))
    .await
}
