"""flower-edge's deployment app: EdgeStrategy on the wall clock and the digits MLP client."""
