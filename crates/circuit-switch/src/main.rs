//! The circuit-switch Lambda function: build configuration and clients once, then serve.

use circuit_switch::capacity::{self, HttpResponder};
use circuit_switch::{CircuitSwitch, SwitchReport};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use lifeboat_aws::{Clients, Env};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lifeboat_aws::logs::init();
    let env = Env::from_process();
    let function = CircuitSwitch::from_env(&env, &Clients::load_in_function().await).await?;
    let function = &function;
    // The stack's capacity check (a CloudFormation custom resource).
    let responder = HttpResponder::new()?;
    let responder = &responder;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        if let Some(request) = capacity::request(&event.payload) {
            capacity::respond(&request, responder).await?;
            return Ok(SwitchReport::default());
        }
        function.handle(&event.payload).await.map_err(Error::from)
    }))
    .await
}
