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
    // The stack's capacity check (a CloudFormation custom resource) needs
    // none of the switch's configuration: it is answered even when the
    // switch cannot start, or a create or delete would wait an hour for an
    // answer that never comes. Every other event gets the start-up error.
    // Its HTTP client is made only for it (a deploy's few requests), not
    // at every cold start.
    let function = CircuitSwitch::from_env(&env, &Clients::load_in_function().await)
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "circuit switch cannot start; only the capacity check is answered");
            e.to_string()
        });
    let function = &function;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        if let Some(request) = capacity::request(&event.payload) {
            capacity::respond(&request, &HttpResponder::new()?).await?;
            return Ok(SwitchReport::default());
        }
        match function {
            Ok(function) => function.handle(&event.payload).await.map_err(Error::from),
            Err(e) => Err(Error::from(format!("circuit switch cannot start: {e}"))),
        }
    }))
    .await
}
