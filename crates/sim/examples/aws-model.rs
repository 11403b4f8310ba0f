//! Prints the AWS world's numbers as the markdown table of
//! docs/aws-model.md (`tools/figures` writes it there).

fn main() {
    print!("{}", lifeboat_sim::aws::AWS.markdown());
}
