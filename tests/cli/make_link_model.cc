// A link model's weights file for the CLI tests (tests/cli/recommend.sh), written as
// Trainer::save writes one: a LightGCN or NGCF recommender with random weights (no training) over
// the nodes of a link dataset, saved with save_weights and its config as YAML.
//
//   test_make_link_model DATA.h5 OUT.h5 [lightgcn|ngcf]
#include <cstdio>
#include <iostream>
#include <string>

#include <graphtensor/config/config.h>
#include <graphtensor/models/model.h>
#include <graphtensor/preprocess/dataset.h>
#include <graphtensor/train/model_io.h>

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::cerr << "usage: test_make_link_model DATA.h5 OUT.h5 [lightgcn|ngcf]\n";
    return 2;
  }
  try {
    gt::Config c;
    c.dataset.path = argv[1];
    c.model.type = argc == 4 ? argv[3] : "lightgcn";
    c.model.embedding_dim = 16;
    c.model.layers = 2;
    c.model.hidden = 16;
    c.model.dropout = 0.1;
    gt::validate_config(c);
    const gt::DatasetInfo info = gt::read_dataset_info(argv[1]);
    gt::check_link_model(c.model, info);
    auto model = gt::build_link_model(c.model, info.num_nodes, gt::Device::cpu(), 7);
    gt::save_weights(argv[2], model->params(), gt::to_yaml(c), 1, gt::DataShape{0, 0, info.num_nodes, info.num_edges});
    std::printf("wrote %s (%s, %lld nodes)\n", argv[2], c.model.type.c_str(), static_cast<long long>(info.num_nodes));
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "test_make_link_model: error: " << e.what() << "\n";
    return 1;
  }
}
