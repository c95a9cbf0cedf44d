func.func @g(%x: i32) -> i32 {
  %0 = "mystery.op"(%x) {level = 3 : i64} : (i32) -> i32
  func.return %0 : i32
}
