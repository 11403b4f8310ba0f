//! The cart Lambda function: build configuration and clients once, then serve.

use cart::CartService;
use lambda_http::{Error, Request, run, service_fn, tracing};
use lifeboat_aws::{Clients, Env};
use lifeboat_lookup::http::{from_lambda, into_lambda};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let env = Env::from_process();
    let function = CartService::from_env(&env, &Clients::load().await)?;
    let function = &function;
    run(service_fn(move |request: Request| async move {
        Ok::<_, Error>(into_lambda(function.handle(&from_lambda(&request)).await))
    }))
    .await
}
