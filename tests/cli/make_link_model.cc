// A link model's weights file for the CLI tests (tests/cli/recommend.sh), written as
// Trainer::save writes one: a LightGCN or NGCF recommender with random weights (no training) over
// the nodes of a link dataset, or (sage) a GraphSAGE link encoder with random weights over the
// dataset's node features (a link-split dataset: as gt-train trains configs/cora-link.yaml), saved
// with save_weights and its config as YAML.
//
//   test_make_link_model DATA.h5 OUT.h5 [lightgcn|ngcf|sage]
#include <cstdio>
#include <iostream>
#include <string>

#include <graphtensor/config/config.h>
#include <graphtensor/models/model.h>
#include <graphtensor/preprocess/dataset.h>
#include <graphtensor/preprocess/feature_table.h>
#include <graphtensor/train/model_io.h>

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::cerr << "usage: test_make_link_model DATA.h5 OUT.h5 [lightgcn|ngcf|sage]\n";
    return 2;
  }
  try {
    gt::Config c;
    c.dataset.path = argv[1];
    c.model.type = argc == 4 ? argv[3] : "lightgcn";
    const bool encoder = c.model.type != "lightgcn" && c.model.type != "ngcf";
    c.model.embedding_dim = encoder ? 0 : 16;
    c.model.layers = 2;
    c.model.hidden = 16;
    c.model.dropout = 0.1;
    if (encoder) c.dataset.normalize = "row";
    gt::validate_config(c);
    const gt::DatasetInfo info = gt::read_dataset_info(argv[1]);
    gt::check_link_model(c.model, info);
    if (encoder) {
      // The encoder reads feature rows padded as the trainer pads them (dataset.align_rows).
      const int64_t width = gt::FeatureTable::aligned_width(info.feature_dim, c.dataset.row_alignment);
      auto model = gt::build_link_encoder(c.model, width, c.model.hidden, gt::Device::cpu(), 7, info.feature_dim);
      gt::save_weights(argv[2], model->params(), gt::to_yaml(c), 1,
                       gt::DataShape{info.feature_dim, info.num_classes, info.num_nodes, info.num_edges});
    } else {
      auto model = gt::build_link_model(c.model, info.num_nodes, gt::Device::cpu(), 7);
      gt::save_weights(argv[2], model->params(), gt::to_yaml(c), 1, gt::DataShape{0, 0, info.num_nodes, info.num_edges});
    }
    std::printf("wrote %s (%s, %lld nodes)\n", argv[2], c.model.type.c_str(), static_cast<long long>(info.num_nodes));
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "test_make_link_model: error: " << e.what() << "\n";
    return 1;
  }
}
